"""Synthetic tasks with a known right answer.

A task is a frozen dataclass with ``sample(batch_size, generator) -> (x, y)``: ``x`` holds
input token ids ``(batch, seq)`` and ``y`` the target per position ``(batch, seq)``, with
``IGNORE`` where nothing is to be predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_int, check_positive_int
from multihead.core.train import IGNORE


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return generator


@dataclass(frozen=True)
class LookupTask:
    """Name the ordered tuple of tokens at fixed offsets back.

    With offsets ``(a_1, ..., a_k)`` the target at every position ``t >= max(a_i)`` is
    ``y_t = sum_i V^(k-i) x_{t-a_i}``, one of ``V**k`` classes: it needs every token *and
    its place*. With the default two offsets (the chapter-1 task, ``y_t = V x_{t-1} +
    x_{t-3}``) one head per offset is a natural solution; a single head must weigh the two
    positions unequally to keep their order (a book exercise proves it). More offsets give
    a task whose heads must do several different jobs at once.

    Shapes: sample -> x (batch, seq_len) in [0, V), y (batch, seq_len) in [0, V**k) or IGNORE.
    """

    vocab_size: int = 8
    seq_len: int = 12
    offsets: tuple[int, ...] = (1, 3)

    def __post_init__(self) -> None:
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("seq_len", self.seq_len)
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size={self.vocab_size} must be at least 2")
        if not isinstance(self.offsets, tuple) or len(self.offsets) < 2:
            raise TypeError(f"offsets must be a tuple of at least two ints, got {self.offsets!r}")
        for i, offset in enumerate(self.offsets):
            check_int(f"offsets[{i}]", offset)
        if min(self.offsets) <= 0 or len(set(self.offsets)) != len(self.offsets):
            raise ValueError(f"offsets={self.offsets} must be different positive ints")
        if max(self.offsets) >= self.seq_len:
            raise ValueError(f"offsets={self.offsets} must be smaller than seq_len={self.seq_len}")

    @property
    def n_classes(self) -> int:
        """Number of target classes, ``V**k`` for ``k`` offsets."""
        return self.vocab_size ** len(self.offsets)

    @property
    def first_target(self) -> int:
        """The first position that has a target."""
        return max(self.offsets)

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw a batch of uniformly random sequences and their targets."""
        check_positive_int("batch_size", batch_size)
        _check_generator(generator)
        n, t = self.seq_len, self.first_target
        x = torch.randint(self.vocab_size, (batch_size, n), generator=generator)
        y = torch.full_like(x, IGNORE)
        target = torch.zeros_like(x[:, t:])
        for a in self.offsets:  # most significant digit first
            target = self.vocab_size * target + x[:, t - a : n - a]
        y[:, t:] = target
        return x, y


@dataclass(frozen=True)
class SubsetCountTask:
    """Count the ones among a fixed random set of positions: ``y_t = sum_{s in S_t} x_s``.

    ``x`` is a random bit string of length ``seq_len``. Each query position ``t`` owns a
    fixed random subset ``S_t`` of ``subset_size`` positions (drawn once from ``seed``), and
    its target is how many ones ``x`` holds there, a class in ``0..subset_size``. One head
    solves it by attending uniformly to ``S_t``, but that pattern is a random 0/1 matrix
    (``gold_pattern``), which no low-rank logit matrix reproduces: the task needs a key
    size of the order of ``seq_len`` (chapter 3).

    Shapes: sample -> x (batch, seq_len) in {0, 1}, y (batch, seq_len) in
    [0, subset_size]; gold_pattern -> (query, key), rows sum to 1.
    """

    seq_len: int = 16
    subset_size: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive_int("seq_len", self.seq_len)
        check_positive_int("subset_size", self.subset_size)
        if self.subset_size >= self.seq_len:
            raise ValueError(
                f"subset_size={self.subset_size} must be smaller than seq_len={self.seq_len}"
            )
        check_int("seed", self.seed, 0)

    @property
    def n_classes(self) -> int:
        """Number of possible targets, ``subset_size + 1``."""
        return self.subset_size + 1

    def membership(self) -> Tensor:
        """``M[t, s] = 1`` if position ``s`` is in ``S_t``. Shapes: -> (seq_len, seq_len)."""
        g = torch.Generator().manual_seed(self.seed)
        scores = torch.rand(self.seq_len, self.seq_len, generator=g)
        chosen = scores.argsort(dim=1)[:, : self.subset_size]  # (seq_len, subset_size)
        M = torch.zeros(self.seq_len, self.seq_len)
        M.scatter_(1, chosen, 1.0)
        return M

    def gold_pattern(self) -> Tensor:
        """The ideal attention: uniform over ``S_t``. Shapes: -> (query, key)."""
        return self.membership() / self.subset_size

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw random bit strings and their counts."""
        check_positive_int("batch_size", batch_size)
        _check_generator(generator)
        x = torch.randint(2, (batch_size, self.seq_len), generator=generator)
        y = (x.float() @ self.membership().T).round().long()  # (batch, seq_len)
        return x, y
