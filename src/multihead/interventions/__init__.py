"""Changing what heads do: masks and ablation, importance, pruning, gates, DropHead, symmetry."""
