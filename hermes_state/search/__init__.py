"""Finding messages and sessions: query parsing, the indexes' searches, title search."""
