"""Plain values and row shapes every layer shares, with no connection.

Text hygiene, message content, odd stored values, the rows handed out, ``model_config``,
compression lineage and the gateway's old ``sessions.json``.
"""
