"""Helpers shared by the exercise checkers."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from types import CodeType, ModuleType
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


def _codes(reference: object) -> dict[CodeType, str]:
    """The code objects of a function, of every method of a class or of every function and
    class defined in a module, each with the dotted name a reader would import."""
    if isinstance(reference, ModuleType):
        found: dict[CodeType, str] = {}
        for obj in vars(reference).values():
            if getattr(obj, "__module__", None) == reference.__name__:
                found.update(_codes(obj))
        return found
    if inspect.isclass(reference):
        found = {}
        for attr in vars(reference).values():
            attr = getattr(attr, "__func__", getattr(attr, "fget", attr))  # static, property
            if inspect.isfunction(attr):
                found.update(_codes(attr))
        return found
    fn = inspect.unwrap(reference)  # past functools.wraps and torch.no_grad
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TypeError(f"cannot trace {reference!r}: give a function, a class or a module")
    return {code: f"{fn.__module__}.{fn.__qualname__}"}


def refuse_reference(fn: Callable, *references: object) -> Callable:
    """``fn`` wrapped so that an answer which calls the package's own solution fails.

    ``references`` are the package's functions, classes (every method) or modules (every
    function and class defined there) that already answer the exercise. While ``fn`` runs,
    a profile hook records every Python call; if one enters a reference, the call raises
    ``AssertionError`` naming it, since wrapping the package's answer is not writing one.
    Calls the checker makes itself, outside ``fn``, are not traced.
    """
    codes: dict[CodeType, str] = {}
    for reference in references:
        codes.update(_codes(reference))

    def guarded(*args: Any, **kwargs: Any) -> Any:
        called: list[str] = []

        def profile(frame, event, _arg):
            if event == "call" and not called and frame.f_code in codes:
                called.append(codes[frame.f_code])

        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            result = fn(*args, **kwargs)
        except Exception as err:
            if called:
                raise AssertionError(_refusal(called[0])) from err
            raise
        finally:
            sys.setprofile(previous)
        if called:
            raise AssertionError(_refusal(called[0]))
        return result

    return guarded


def _refusal(name: str) -> str:
    return f"your answer calls {name}: write it yourself (the package's version is no answer)"
