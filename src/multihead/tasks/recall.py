"""Multi-query associative recall: the standard synthetic for comparing attention variants.

A sequence lists ``n_pairs`` key-value pairs, then asks for every key again in a new order:

    k_1 v_1 k_2 v_2 ... k_N v_N | k_3 v_3 k_1 v_1 ...

and the model must predict, at each asked key, the value it was paired with. Keys are drawn
without replacement from ``n_keys`` key tokens and values with replacement from ``n_values``
value tokens (ids ``n_keys`` and up), so the answer is in the context and nowhere else: a
model must find the earlier copy of the asked key and read the token after it. That needs two
attention layers (a head that tags each value with the key before it, then a head that looks
the tag up) and room in the keys and values: how many pairs a layer can tell apart is what
sharing or compressing keys and values across heads puts at risk (chapter 10).

Shapes: sample -> x (batch, 4 * n_pairs) token ids in [0, n_keys + n_values),
y (batch, 4 * n_pairs) the value at each asked key of the second half, ``IGNORE`` elsewhere.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from multihead._checks import check_positive_int
from multihead.core.config import TrainConfig
from multihead.core.decoder import Decoder
from multihead.core.train import IGNORE, History, train_seeds


@dataclass(frozen=True)
class RecallTask:
    """Multi-query associative recall (see the module docstring).

    Shapes: sample -> x, y (batch, seq_len).
    """

    n_keys: int = 16
    n_values: int = 16
    n_pairs: int = 6

    def __post_init__(self) -> None:
        check_positive_int("n_keys", self.n_keys)
        check_positive_int("n_values", self.n_values)
        check_positive_int("n_pairs", self.n_pairs)
        if self.n_pairs > self.n_keys:
            raise ValueError(
                f"n_pairs={self.n_pairs} needs as many different keys: raise n_keys "
                f"(now {self.n_keys}) or lower n_pairs"
            )

    @property
    def vocab_size(self) -> int:
        """Key tokens ``0..n_keys-1``, then value tokens."""
        return self.n_keys + self.n_values

    @property
    def seq_len(self) -> int:
        """The pairs, then the same pairs asked again: ``4 * n_pairs`` tokens."""
        return 4 * self.n_pairs

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw ``batch_size`` sequences and their targets."""
        check_positive_int("batch_size", batch_size)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        B, N = batch_size, self.n_pairs
        keys = torch.rand(B, self.n_keys, generator=generator).argsort(1)[:, :N]  # (B, N)
        values = self.n_keys + torch.randint(self.n_values, (B, N), generator=generator)
        order = torch.rand(B, N, generator=generator).argsort(1)  # (B, N) the asking order
        asked_k, asked_v = keys.gather(1, order), values.gather(1, order)
        context = torch.stack([keys, values], 2).flatten(1)  # (B, 2N): k v k v ...
        asked = torch.stack([asked_k, asked_v], 2).flatten(1)  # (B, 2N)
        x = torch.cat([context, asked], 1)  # (B, 4N)
        y = torch.full_like(x, IGNORE)
        y[:, 2 * N :: 2] = asked_v  # at each asked key: its value (the next token)
        return x, y


def train_recall_decoder(
    task: RecallTask,
    seed: int,
    config: TrainConfig,
    *,
    width: Mapping[str, int],
    layout: Mapping[str, int],
    snapshot_at: int | None = None,
) -> tuple[nn.Module, History, nn.Module | None]:
    """One 2-layer ``Decoder`` trained on ``task`` from ``seed``: ``width`` gives ``d_model``,
    ``n_heads`` and ``d_head`` (the feed-forward layer is twice ``d_model`` wide), ``layout``
    the sharing (``{"n_kv_heads": k}`` or ``{"d_latent": c}``). With ``snapshot_at`` a copy of
    the model after that many steps comes back too (``None`` otherwise). A function of the
    package, so ``runtime.side_by_side`` can train several seeds and layouts at once: the
    same model, bit for bit, as ``train_seeds([seed], ...)`` here.

    Shapes: none (a model, its history, the snapshot).
    """
    if not isinstance(task, RecallTask):
        raise TypeError(f"task must be a RecallTask, got {type(task).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    missing = {"d_model", "n_heads", "d_head"} - set(width)
    if missing:
        raise ValueError(f"width must give d_model, n_heads and d_head; missing {sorted(missing)}")
    if snapshot_at is not None and not 0 <= snapshot_at <= config.steps:
        raise ValueError(f"snapshot_at must lie in [0, config.steps={config.steps}]")
    snaps: list[nn.Module] = []

    def keep(model: nn.Module, step: int) -> None:  # before each step: ``step`` are done
        if step == snapshot_at:
            snaps.append(copy.deepcopy(model))

    def make(_: int) -> nn.Module:
        d = width["d_model"]
        return Decoder(task.vocab_size, task.seq_len, d, 2, width["n_heads"],
                       d_head=width["d_head"], d_ff=2 * d, **layout)  # fmt: skip

    on_step = keep if snapshot_at is not None else None
    (model,), (history,) = train_seeds([seed], make, task.sample, config, on_step=on_step)
    if snapshot_at == config.steps and not snaps:  # ``on_step`` runs before each step only
        snaps.append(copy.deepcopy(model))
    return model, history, snaps[0] if snaps else None
