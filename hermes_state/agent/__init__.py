"""The agent's API: SessionDB and what only the agent calls (gateway, compression, repair)."""
