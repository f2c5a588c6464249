"""Frozen configurations. Make a variant with ``dataclasses.replace(cfg, n_heads=8)``."""

from __future__ import annotations

from dataclasses import dataclass

from multihead._checks import (
    check_choice,
    check_int,
    check_number,
    check_positive_int,
    check_probability,
)

INIT_SCHEMES = ("xavier", "scaled", "ds_init", "shared_heads")
NORMS = ("pre", "post")
ATTENTION_KINDS = ("standard", "talking_heads")


def head_sizes(
    d_model: int, n_heads: int, d_key: int | None = None, d_value: int | None = None
) -> tuple[int, int]:
    """The one place where a head's sizes default: ``d_key`` and ``d_value`` are
    ``d_model // n_heads`` unless given, and then ``n_heads`` must divide ``d_model``.

    Shapes: none.
    """
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    if (d_key is None or d_value is None) and d_model % n_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; "
            "choose sizes that divide, or pass d_key and d_value explicitly"
        )
    d_key = d_model // n_heads if d_key is None else check_positive_int("d_key", d_key)
    d_value = d_model // n_heads if d_value is None else check_positive_int("d_value", d_value)
    return d_key, d_value


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and options of a small Transformer.

    ``d_key``/``d_value`` default to ``d_model // n_heads``; ``d_ff`` to ``4 * d_model``;
    ``n_classes`` (the output size) to ``vocab_size``. ``n_decoder_layers`` is only used by
    the encoder-decoder. ``attention`` is ``"standard"`` or ``"talking_heads"`` (both mixing
    steps, identity at init). ``init`` names an init scheme (see
    ``multihead.core.model.init_model``): ``init_gain`` scales it and ``init_epsilon`` is the
    noise of ``"shared_heads"``.
    """

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    n_decoder_layers: int = 2
    d_key: int | None = None
    d_value: int | None = None
    d_ff: int | None = None
    n_classes: int | None = None
    max_len: int = 64
    dropout: float = 0.0
    attn_dropout: float = 0.0
    norm: str = "pre"
    attention: str = "standard"
    init: str = "xavier"
    init_gain: float = 1.0
    init_epsilon: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("n_decoder_layers", self.n_decoder_layers)
        for name in ("d_key", "d_value", "d_ff", "n_classes"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        head_sizes(self.d_model, self.n_heads, self.d_key, self.d_value)
        for name in ("dropout", "attn_dropout"):
            check_probability(name, getattr(self, name))
        check_choice("norm", self.norm, NORMS)
        check_choice("attention", self.attention, ATTENTION_KINDS)
        if self.attention == "talking_heads" and self.attn_dropout:
            raise ValueError("attn_dropout is not supported with attention='talking_heads'")
        check_choice("init", self.init, INIT_SCHEMES)
        check_number("init_gain", self.init_gain, 0.0, None, "()")
        check_number("init_epsilon", self.init_epsilon, 0.0)

    def head_sizes(self) -> tuple[int, int]:
        """``(d_key, d_value)`` each head actually uses (see ``head_sizes``)."""
        return head_sizes(self.d_model, self.n_heads, self.d_key, self.d_value)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings: AdamW with linear warm-up, then a constant rate."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 50
    grad_clip: float = 1.0
    seed: int = 0
    eval_every: int = 0

    def __post_init__(self) -> None:
        check_positive_int("steps", self.steps)
        check_positive_int("batch_size", self.batch_size)
        check_number("lr", self.lr, 0.0, None, "()")
        check_number("weight_decay", self.weight_decay, 0.0)
        for name in ("warmup", "seed", "eval_every"):
            check_int(name, getattr(self, name), 0)
        check_number("grad_clip", self.grad_clip, 0.0)  # 0 turns clipping off
