"""Embedders: text to L2-normalised float32 rows."""
