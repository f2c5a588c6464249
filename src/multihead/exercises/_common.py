"""Helpers shared by the exercise checkers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def ok(message: str) -> str:
    """Print and return the success line of a checker."""
    line = f"Correct: {message}"
    print(line)
    return line


def require_callable(name: str, fn: object) -> None:
    """Raise a clear TypeError unless ``fn`` is callable."""
    if not callable(fn):
        raise TypeError(f"{name} must be a function, got {type(fn).__name__}")


def expect(condition: object, hint: str) -> None:
    """Raise ``AssertionError(hint)`` unless ``condition`` holds (an ``assert`` statement
    would vanish under ``python -O``)."""
    if not condition:
        raise AssertionError(hint)


def random_patterns(seed: int, batch: int = 3, heads: int = 4, n: int = 7) -> torch.Tensor:
    """Random attention patterns without ties, for checkers.

    Shapes: -> (batch, heads, n, n), rows sum to 1.
    """
    gen = torch.Generator().manual_seed(seed)
    scores = 3 * torch.randn(batch, heads, n, n, generator=gen)
    return scores.softmax(-1)  # ties have probability 0


def checker(fn: Callable) -> Callable:
    """Mark ``fn`` as a checker: an answer whose body is still the notebook's stub (it raises
    ``NotImplementedError``) fails with a hint, not with a traceback from inside the checker."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except NotImplementedError as err:
            detail = f" ({err})" if str(err) else ""
            raise AssertionError(
                f"your function still raises NotImplementedError{detail}: fill in the function "
                "body first (replace the raise line with your code), then run the check again"
            ) from None

    return wrapped
