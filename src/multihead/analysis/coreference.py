"""Coreference heads (Clark et al. 2019, section 5): does a head's largest weight, at a
pronoun, land on the pronoun's antecedent, more often than a rule that needs no attention?

The rules are Clark et al.'s baselines: the **nearest** noun before the pronoun, and the
nearest noun before it that **matches** the antecedent (in class, or in number: whatever
``noun_class`` holds). A rule's accuracy is the share of pronouns whose antecedent it finds.

Pure functions of tensors. ``query`` says which query row of the pattern stands for each
item's pronoun (the pronoun's own position for encoder self-attention; the decoder step that
emits the target pronoun for cross-attention); ``pronoun`` is its position among the keys.
Credit is ``metrics.argmax_credit``'s: ties share it, so a uniform head scores chance.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import check_bool_mask, check_int_tensor, check_number, check_pattern
from multihead.analysis.metrics import argmax_credit


def _long(name: str, x: object, shape: tuple[int, ...]) -> Tensor:
    check_int_tensor(name, x, layout=str(shape))
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {shape}")
    return x.long()


def _check_links(pronoun, antecedent, is_noun, noun_class) -> tuple[Tensor, ...]:
    if not isinstance(is_noun, Tensor) or is_noun.ndim != 2:
        raise ValueError("is_noun must be a bool tensor shaped (batch, keys), True at nouns")
    n, seq = is_noun.shape
    check_bool_mask("is_noun", is_noun, (n, seq), "True at nouns")
    pronoun = _long("pronoun", pronoun, (n,))
    antecedent = _long("antecedent", antecedent, (n,))
    noun_class = _long("noun_class", noun_class, (n, seq))
    if bool(((pronoun < 0) | (pronoun >= seq)).any()):
        raise ValueError(f"pronoun holds a position outside 0..{seq - 1}")
    if bool(((antecedent < 0) | (antecedent >= pronoun)).any()):
        raise ValueError("antecedent must be a position before its pronoun on every item")
    if not bool(is_noun.gather(1, antecedent[:, None]).all()):
        raise ValueError("antecedent must point at a noun (is_noun False there)")
    return pronoun, antecedent, is_noun, noun_class


def nearest_noun(
    pronoun: Tensor, is_noun: Tensor, noun_class: Tensor | None = None, want: Tensor | None = None
) -> Tensor:
    """The nearest noun before each pronoun; with ``noun_class`` and ``want``, the nearest
    one whose class is ``want`` (-1 where there is none).

    Shapes: pronoun (batch,), is_noun (batch, keys), noun_class (batch, keys), want (batch,)
    -> (batch,) positions.
    """
    if not isinstance(is_noun, Tensor) or is_noun.ndim != 2:
        raise ValueError("is_noun must be a bool tensor shaped (batch, keys), True at nouns")
    n, seq = is_noun.shape
    check_bool_mask("is_noun", is_noun, (n, seq), "True at nouns")
    pronoun = _long("pronoun", pronoun, (n,))
    ok = is_noun & (torch.arange(seq)[None, :] < pronoun[:, None])  # (batch, keys)
    if (noun_class is None) != (want is None):
        raise ValueError("pass noun_class and want together (or neither)")
    if noun_class is not None:
        ok = ok & (_long("noun_class", noun_class, (n, seq)) == _long("want", want, (n,))[:, None])
    pos = torch.where(ok, torch.arange(seq)[None, :], torch.full_like(ok, -1, dtype=torch.long))
    return pos.amax(1)  # the last allowed position before the pronoun, or -1


def rule_accuracy(
    pronoun: Tensor, antecedent: Tensor, is_noun: Tensor, noun_class: Tensor
) -> dict[str, float]:
    """Clark et al.'s two baselines: how often the nearest preceding noun (``nearest``) and
    the nearest preceding noun of the antecedent's class (``same_class``) is the antecedent.

    Shapes: pronoun, antecedent (batch,); is_noun, noun_class (batch, keys) -> floats.
    """
    pronoun, antecedent, is_noun, noun_class = _check_links(
        pronoun, antecedent, is_noun, noun_class
    )
    want = noun_class.gather(1, antecedent[:, None])[:, 0]  # (batch,)
    near = nearest_noun(pronoun, is_noun)
    same = nearest_noun(pronoun, is_noun, noun_class, want)
    return {
        "nearest": float((near == antecedent).double().mean()),
        "same_class": float((same == antecedent).double().mean()),
    }


def class_copy_accuracy(
    pronoun: Tensor, antecedent: Tensor, is_noun: Tensor, noun_class: Tensor
) -> float:
    """How often the nearest preceding noun has the antecedent's class: the accuracy of a
    translation that gives the pronoun the class of the nearest noun (number aside).

    Shapes: pronoun, antecedent (batch,); is_noun, noun_class (batch, keys) -> float.
    """
    pronoun, antecedent, is_noun, noun_class = _check_links(
        pronoun, antecedent, is_noun, noun_class
    )
    near = nearest_noun(pronoun, is_noun)
    want = noun_class.gather(1, antecedent[:, None])[:, 0]
    got = noun_class.gather(1, near.clamp_min(0)[:, None])[:, 0]
    return float(((got == want) & (near >= 0)).double().mean())


def coreference(
    pattern: Tensor,
    query: Tensor,
    pronoun: Tensor,
    antecedent: Tensor,
    is_noun: Tensor,
    noun_class: Tensor,
    margin: float = 0.10,
) -> dict:
    """Clark et al.'s coreference criterion for every head: the share of pronouns whose
    query row (``query``) has its largest weight on the gold antecedent (``accuracy``), the
    two rule baselines of ``rule_accuracy``, and ``is_role`` (accuracy at least ``margin``
    above the better rule).

    Shapes: pattern (batch, heads, query, key) or (layers, batch, heads, query, key); query,
    pronoun, antecedent (batch,); is_noun, noun_class (batch, key) -> accuracy and is_role
    (heads,) or (layers, heads); nearest, same_class floats; count int.
    """
    layout = "(batch, heads, query, key) or (layers, batch, heads, query, key)"
    p = check_pattern("pattern", pattern, ndim=(4, 5), layout=layout)
    p5 = p if p.ndim == 5 else p[None]
    n, keys = p5.shape[1], p5.shape[4]
    if not isinstance(is_noun, Tensor) or tuple(is_noun.shape) != (n, keys):
        raise ValueError(f"is_noun must be shaped (batch, key) = {(n, keys)} to fit pattern")
    check_number("margin", margin, 0.0, 1.0)
    query = _long("query", query, (n,))
    if bool(((query < 0) | (query >= p5.shape[3])).any()):
        raise ValueError(f"query holds a row outside 0..{p5.shape[3] - 1} of the pattern")
    rules = rule_accuracy(pronoun, antecedent, is_noun, noun_class)
    antecedent = antecedent.long()
    idx = query[None, :, None, None, None].expand(*p5.shape[:3], 1, keys)
    rows = p5.gather(3, idx)[:, :, :, 0]  # (layers, batch, heads, key): the pronoun's rows
    target = torch.zeros(n, keys, dtype=torch.bool)
    target[torch.arange(n), antecedent] = True
    credit = argmax_credit(rows, target[None, :, None, :])  # (layers, batch, heads)
    accuracy = credit.mean(1)  # (layers, heads)
    best_rule = max(rules["nearest"], rules["same_class"])
    out = {
        "accuracy": accuracy if p.ndim == 5 else accuracy[0],
        "nearest": rules["nearest"],
        "same_class": rules["same_class"],
        "count": n,
    }
    out["is_role"] = out["accuracy"] >= best_rule + margin
    return out
