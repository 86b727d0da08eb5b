"""``swebox eval``'s library half: search-based evaluation and its crash-safe records."""
