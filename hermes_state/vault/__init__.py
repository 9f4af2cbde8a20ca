"""The vault (per-year stores of old sessions) and a profile's stores read as one."""
