"""Changing what heads do: masks and ablation, importance and relevance (LRP), pruning, gates,
DropHead, symmetry."""
