"""The command groups: sessions, db, profile, backup and restore, vault, usage, replicate."""
