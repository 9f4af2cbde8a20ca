"""Export and import: sessions out to JSON Lines and back into a store of any layout."""
