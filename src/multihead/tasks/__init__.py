"""Data with known answers: synthetic tasks, the grammar corpus, translation and tagging."""
