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

Shapes: sample -> x (batch, prefix + 2 * segment) token ids in [0, vocab_size), y like x.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_int, check_positive_int, check_tensor
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
        check_positive_int("batch_size", batch_size)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        B, P, S = batch_size, self.prefix, self.segment
        draws = torch.randint(self.vocab_size, (B, P + S), generator=generator)  # prefix, segment
        x = torch.cat([draws, draws[:, P:]], dim=1)  # (B, P + 2S): the segment again
        y = torch.full_like(x, IGNORE)
        y[:, :-1] = x[:, 1:]  # the next token
        return x, y

    def in_context_loss(self, losses: Tensor) -> Tensor:
        """Mean loss on the second copy's targets minus the first copy's: negative when the
        model uses the earlier copy.

        Shapes: losses (..., seq_len), one per target position (``IGNORE`` ones unused)
        -> (...).
        """
        check_tensor("losses", losses, min_ndim=1, layout="(..., seq_len)")
        if losses.shape[-1] != self.seq_len:
            raise ValueError(
                f"losses has {losses.shape[-1]} positions, expected seq_len={self.seq_len}"
            )
        first, second = self.first_copy.to(losses.device), self.second_copy.to(losses.device)
        return losses[..., second].mean(-1) - losses[..., first].mean(-1)
