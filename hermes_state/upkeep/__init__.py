"""Keeping a store small and sound: delete, prune, optimize, vacuum and check."""
