"""What a store records: sessions, messages, listings, conversations, ownership, the ledger."""
