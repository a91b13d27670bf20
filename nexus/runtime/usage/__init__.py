"""API usage per user and day, reported by the dialect AppServices."""
