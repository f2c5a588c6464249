"""Small argument checks shared by the package, so every error names the argument."""

from __future__ import annotations

from typing import Any


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int > 0, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value <= 0:
        raise ValueError(f"{name}={value} must be a positive integer")
    return value


def check_probability(name: str, value: Any) -> float:
    """Return ``value`` as a float in [0, 1), else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value} must lie in [0, 1)")
    return float(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise listing them."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
    return value
