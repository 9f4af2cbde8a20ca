"""Rows back from a damaged file: page walks, salvage, cross-checks and the recovered store."""
