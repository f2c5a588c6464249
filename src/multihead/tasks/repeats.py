"""Repeated random segments: the sequences on which induction heads show themselves.

Each sequence is an optional random prefix, then a random segment of ``segment`` tokens, then
the same segment again:

    p_1 .. p_P | s_1 s_2 .. s_S | s_1 s_2 .. s_S

Every token is drawn uniformly from the vocabulary (with replacement), so nothing in the first
copy can be predicted from what came before, and everything in the second copy can be: find the
earlier copy of the current token and predict the token that followed it. A model that does so
has lower loss on the second copy than on the first (Olsson et al. 2022); the difference is the
*in-context loss* below.

Targets are next tokens everywhere: ``y[t] = x[t + 1]``, ``IGNORE`` at the last position.
The target position ``t`` *is in a copy* when both ``x[t]`` and the token it predicts,
``x[t + 1]``, are in that copy: ``first_copy`` and ``second_copy`` each hold ``segment - 1``
positions, at the same offsets within their copies (the boundary targets are in neither).

With ``min_segment`` set, each sequence draws its own segment length, uniform in
``min_segment .. segment``, and a longer random prefix makes up the difference, so every sequence
has ``prefix + 2 * segment`` tokens but the distance between the copies varies: no fixed offset
finds the earlier copy, only its content does. ``sample_layout`` returns each sequence's segment
length and the start of its first copy; ``copy_masks`` and ``in_context_loss`` take them.

Shapes: sample -> x (batch, prefix + 2 * segment) token ids in [0, vocab_size), y like x.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_int, check_int_tensor, check_positive_int, check_tensor
from multihead.core.train import IGNORE


@dataclass(frozen=True)
class RepeatTask:
    """A random segment repeated once, after an optional random prefix (see the module
    docstring).

    Shapes: sample -> x, y (batch, seq_len).
    """

    vocab_size: int = 32
    segment: int = 16
    prefix: int = 0
    min_segment: int | None = None

    def __post_init__(self) -> None:
        check_positive_int("vocab_size", self.vocab_size)
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size={self.vocab_size}: a random segment needs 2 tokens")
        check_positive_int("segment", self.segment)
        if self.segment < 2:
            raise ValueError(
                f"segment={self.segment}: a copy needs at least 2 tokens to hold a target "
                "that depends on the earlier copy"
            )
        check_int("prefix", self.prefix, 0)
        if self.min_segment is not None:
            check_int("min_segment", self.min_segment, 2, self.segment + 1)

    @property
    def seq_len(self) -> int:
        """The prefix and both copies: ``prefix + 2 * segment`` tokens."""
        return self.prefix + 2 * self.segment

    @property
    def first_copy(self) -> Tensor:
        """Target positions inside the first copy: ``prefix .. prefix + segment - 2``.

        Shapes: -> (segment - 1,) long.
        """
        return torch.arange(self.prefix, self.prefix + self.segment - 1)

    @property
    def second_copy(self) -> Tensor:
        """Target positions inside the second copy, ``segment`` later than ``first_copy``:
        where an induction head can read the answer from the first copy.

        Shapes: -> (segment - 1,) long.
        """
        return self.first_copy + self.segment

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw ``batch_size`` sequences and their next-token targets.

        Shapes: -> x (batch_size, seq_len), y (batch_size, seq_len), IGNORE at the end.
        """
        return self.sample_layout(batch_size, generator)[:2]

    def sample_layout(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``sample``, with each sequence's segment length and the start of its first copy.

        Shapes: -> x, y (batch_size, seq_len), lengths (batch_size,), starts (batch_size,).
        """
        check_positive_int("batch_size", batch_size)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        B, n = batch_size, self.seq_len
        draws = torch.randint(self.vocab_size, (B, n), generator=generator)
        if self.min_segment is None:
            lengths = torch.full((B,), self.segment)
        else:
            lengths = torch.randint(self.min_segment, self.segment + 1, (B,), generator=generator)
        starts = n - 2 * lengths  # the prefix fills the rest: (B,)
        pos = torch.arange(n)[None]  # (1, n)
        second = pos >= (starts + lengths)[:, None]  # (B, n): inside the second copy
        x = draws.gather(1, torch.where(second, pos - lengths[:, None], pos))  # copy it
        y = torch.full_like(x, IGNORE)
        y[:, :-1] = x[:, 1:]  # the next token
        return x, y, lengths, starts

    def copy_masks(self, lengths: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        """The target positions inside each sequence's first and second copy (see the module
        docstring), from ``sample_layout``'s lengths and starts.

        Shapes: lengths, starts (batch,) -> first, second (batch, seq_len) bool.
        """
        check_int_tensor("lengths", lengths, ndim=1, lo=2, layout="(batch,)")
        check_int_tensor("starts", starts, ndim=1, lo=0, layout="(batch,)")
        if lengths.shape != starts.shape or bool((starts + 2 * lengths > self.seq_len).any()):
            raise ValueError("lengths and starts must come from one sample_layout of this task")
        pos = torch.arange(self.seq_len, device=lengths.device)[None]  # (1, n)
        lo, L = starts[:, None], lengths[:, None]
        first = (pos >= lo) & (pos < lo + L - 1)
        return first, (pos >= lo + L) & (pos < lo + 2 * L - 1)

    def in_context_loss(
        self, losses: Tensor, lengths: Tensor | None = None, starts: Tensor | None = None
    ) -> Tensor:
        """Mean loss on the second copy's targets minus the first copy's: negative when the
        model uses the earlier copy. With ``lengths`` and ``starts`` (from ``sample_layout``)
        each sequence uses its own copies; without, the fixed layout.

        Shapes: losses (..., seq_len), one per target position (``IGNORE`` ones unused),
        lengths, starts (batch,) with losses (batch, seq_len) -> (...).
        """
        check_tensor("losses", losses, min_ndim=1, layout="(..., seq_len)")
        if losses.shape[-1] != self.seq_len:
            raise ValueError(
                f"losses has {losses.shape[-1]} positions, expected seq_len={self.seq_len}"
            )
        if lengths is None and starts is None:
            first, second = self.first_copy.to(losses.device), self.second_copy.to(losses.device)
            return losses[..., second].mean(-1) - losses[..., first].mean(-1)
        if lengths is None or starts is None:
            raise ValueError("pass both lengths and starts (from sample_layout), or neither")
        first, second = self.copy_masks(lengths, starts)  # (batch, n)
        if losses.shape != first.shape:
            raise ValueError(f"losses must be (batch, seq_len) = {tuple(first.shape)}")
        mean = lambda m: (losses * m).sum(-1) / m.sum(-1)  # noqa: E731
        return mean(second) - mean(first)
