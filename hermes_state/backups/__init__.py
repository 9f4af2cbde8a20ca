"""Copies of a profile: backup archives, restore, replicas, and the disk a profile takes."""
