"""What a model that reads only the target side can reach: n-gram frequency predictors.

A translation model that has learned its task must do better than any predictor that never
looks at the source sentence. The strongest simple one predicts each target token from the
tokens just before it, by how often each token followed that context in training sentences.
``ngram_accuracy`` scores it, so that a competence threshold can be fixed from the task.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor

from multihead._checks import check_positive_int


def _rows(name: str, ids: Tensor, pad_id: int) -> list[list[int]]:
    if not isinstance(ids, Tensor) or ids.ndim != 2 or ids.dtype != torch.long:
        got = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(
            f"{name} must be a (sentences, length) long tensor of token ids, got {got}"
        )
    if ids.shape[1] < 2:
        raise ValueError(f"{name} needs a start token and at least one token per row")
    rows = [[t for t in row if t != pad_id] for row in ids.tolist()]
    return [r for r in rows if len(r) > 1]


def ngram_accuracy(train: Tensor, test: Tensor, order: int, *, pad_id: int = 0) -> float:
    """Next-token accuracy on ``test`` of the order-``order`` frequency predictor fitted on
    ``train``: each token is predicted as the one that most often followed the longest of its
    contexts (up to ``order - 1`` tokens before it) seen in training, backing off to shorter
    contexts and, with none, to the most frequent token. Row ``i`` is a start token followed by
    a sentence; the start token is never predicted and ``pad_id`` is skipped.

    Shapes: train (n, T), test (m, T') -> float.
    """
    order = check_positive_int("order", order)
    fit, score = _rows("train", train, pad_id), _rows("test", test, pad_id)
    if not fit or not score:
        raise ValueError("train and test must each hold a row with a token after the start")
    follow: dict[tuple[int, ...], Counter] = {}
    for row in fit:
        for i in range(1, len(row)):
            for k in range(order):  # context lengths 0 .. order - 1
                if i - k >= 0:
                    follow.setdefault(tuple(row[i - k : i]), Counter())[row[i]] += 1
    best = {ctx: counts.most_common(1)[0][0] for ctx, counts in follow.items()}
    hits = total = 0
    for row in score:
        for i in range(1, len(row)):
            for k in range(min(order - 1, i), -1, -1):  # the longest context seen first
                guess = best.get(tuple(row[i - k : i]))
                if guess is not None:
                    break
            hits += guess == row[i]
            total += 1
    return hits / total
