"""Tooling: notebook maintenance and timing."""
