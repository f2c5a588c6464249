"""Helpers shared by the exercise checkers."""

from __future__ import annotations


def ok(message: str) -> str:
    """Print and return the success line of a checker."""
    line = f"Correct: {message}"
    print(line)
    return line


def require_callable(name: str, fn: object) -> None:
    """Raise a clear TypeError unless ``fn`` is callable."""
    if not callable(fn):
        raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
