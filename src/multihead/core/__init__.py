"""The model: attention, hook points, talking heads, layers, models, configs, training."""
