"""Pure functions of tensors: metrics, head distances, roles, probes, low-rank constructions."""
