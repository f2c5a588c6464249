"""Synthetic tasks with a known right answer.

A task is a frozen dataclass with ``sample(batch_size, generator) -> (x, y)``: ``x`` holds
input token ids ``(batch, seq)`` and ``y`` the target per position ``(batch, seq)``, with
``IGNORE`` where nothing is to be predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_positive_int

IGNORE = -100  # target value skipped by the loss and the accuracy


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return generator


@dataclass(frozen=True)
class PairLookupTask:
    """Name the ordered pair of tokens at two fixed offsets back: ``y_t = V x_{t-a} + x_{t-b}``.

    Every position ``t >= max(a, b)`` has a target among ``V**2`` classes that needs both
    tokens *and their order*. One head per offset is a natural solution; a single head must
    weigh the two positions unequally to keep the order (a book exercise proves it).

    Shapes: sample -> x (batch, seq_len) in [0, V), y (batch, seq_len) in [0, V**2) or IGNORE.
    """

    vocab_size: int = 8
    seq_len: int = 12
    offsets: tuple[int, int] = (1, 3)

    def __post_init__(self) -> None:
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("seq_len", self.seq_len)
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size={self.vocab_size} must be at least 2")
        if (
            not isinstance(self.offsets, tuple)
            or len(self.offsets) != 2
            or any(isinstance(o, bool) or not isinstance(o, int) for o in self.offsets)
        ):
            raise TypeError(f"offsets must be a tuple of two ints, got {self.offsets!r}")
        a, b = self.offsets
        if a <= 0 or b <= 0 or a == b:
            raise ValueError(f"offsets={self.offsets} must be two different positive ints")
        if max(a, b) >= self.seq_len:
            raise ValueError(f"offsets={self.offsets} must be smaller than seq_len={self.seq_len}")

    @property
    def n_classes(self) -> int:
        """Number of target classes, ``V**2``."""
        return self.vocab_size**2

    @property
    def first_target(self) -> int:
        """The first position that has a target."""
        return max(self.offsets)

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw a batch of uniformly random sequences and their targets."""
        check_positive_int("batch_size", batch_size)
        _check_generator(generator)
        a, b = self.offsets
        n, t = self.seq_len, self.first_target
        x = torch.randint(self.vocab_size, (batch_size, n), generator=generator)
        y = torch.full_like(x, IGNORE)
        y[:, t:] = self.vocab_size * x[:, t - a : n - a] + x[:, t - b : n - b]
        return x, y
