"""What the store says: statistics, usage and cost, the watch snapshot, secret redaction."""
