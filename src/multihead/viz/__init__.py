"""Figures and interactive explorers."""
