"""Between a result and the screen or a script: safe text, fitted tables, records, pager."""
