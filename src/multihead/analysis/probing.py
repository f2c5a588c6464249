"""Linear probes on per-head outputs: what can a linear read-out recover from one head?

A probe is a multinomial logistic regression fitted on the training tokens and scored on
held-out tokens. Many probes (one per head) are fitted at once as a batch of independent
linear models. Sentences, not tokens, are split between fitting and scoring, so a probe
never sees a test sentence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from multihead._checks import (
    check_bool,
    check_bool_mask,
    check_int,
    check_int_tensor,
    check_number,
    check_positive_int,
    check_tensor,
)


def majority_accuracy(train_labels: Tensor, test_labels: Tensor) -> float:
    """Accuracy on ``test_labels`` of always answering the most common training label.

    Shapes: train_labels (n,), test_labels (m,) integer -> float.
    """
    for name, t in (("train_labels", train_labels), ("test_labels", test_labels)):
        check_int_tensor(name, t, ndim=1, nonempty=True, layout="(n,), one label per token")
    majority = torch.bincount(train_labels).argmax()
    return (test_labels == majority).float().mean().item()


def position_majority_accuracy(train_labels: Tensor, test_labels: Tensor, pad: int = 0) -> float:
    """Accuracy on the non-``pad`` entries of ``test_labels`` of a guess that sees only the
    position: at each position, the training split's most frequent label there (a model that
    knows the word frequencies of every target position and nothing of the input). Positions
    beyond the training split's longest sequence are guessed wrong.

    Shapes: train_labels (n, T), test_labels (m, T') integer, padded with ``pad`` -> float.
    """
    for name, t in (("train_labels", train_labels), ("test_labels", test_labels)):
        check_int_tensor(name, t, ndim=2, nonempty=True, layout="(sentences, position)")
    check_int("pad", pad)
    n_labels = int(max(train_labels.max(), test_labels.max())) + 1
    width = max(train_labels.shape[1], test_labels.shape[1])
    counts = torch.zeros(width, n_labels)  # (position, label)
    real = train_labels != pad
    pos = torch.arange(train_labels.shape[1]).expand_as(train_labels)
    counts.index_put_((pos[real], train_labels[real]), torch.ones(int(real.sum())), True)
    guess = counts.argmax(-1)  # (position,)
    guess[counts.sum(-1) == 0] = pad  # never seen: a guess that is never right
    scored = test_labels != pad
    if not scored.any():
        raise ValueError(f"test_labels holds only pad={pad}: nothing to score")
    hits = (test_labels == guess[: test_labels.shape[1]]) & scored
    return hits.sum().item() / scored.sum().item()


def fit_probes(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    n_classes: int,
    *,
    steps: int = 150,
    lr: float = 0.05,
    weight_decay: float = 1e-3,
    seed: int = 0,
) -> Tensor:
    """Fit one linear softmax classifier per leading index and return test accuracies.

    Features are standardised with the training mean and standard deviation first.

    Shapes: train_x (probes, n, d), train_y (n,), test_x (probes, m, d), test_y (m,)
    -> accuracy (probes,).
    """
    layout = "(probes, tokens, d)"
    check_tensor("train_x", train_x, ndim=3, layout=layout)
    check_tensor("test_x", test_x, ndim=3, layout=layout)
    if train_x.shape[::2] != test_x.shape[::2]:
        raise ValueError(
            f"train_x {tuple(train_x.shape)} and test_x {tuple(test_x.shape)} must be "
            f"{layout} with the same probes and d"
        )
    n_classes = check_positive_int("n_classes", n_classes)
    steps = check_positive_int("steps", steps)
    check_number("lr", lr, 0.0, None, "()")
    check_number("weight_decay", weight_decay, 0.0)
    check_int("seed", seed, 0)
    for name, y, x in (("train_y", train_y, train_x), ("test_y", test_y, test_x)):
        check_int_tensor(name, y, ndim=1, layout="(tokens,), one label per token")
        if len(y) != x.shape[1]:
            raise ValueError(f"{name} has {len(y)} labels for {x.shape[1]} tokens; give one each")
        if y.numel() and (y.min() < 0 or y.max() >= n_classes):
            raise ValueError(f"{name}: labels must lie in [0, n_classes={n_classes})")
    mean, std = train_x.mean(1, keepdim=True), train_x.std(1, keepdim=True).clamp_min(1e-6)
    xs, xt = (train_x - mean) / std, (test_x - mean) / std
    gen = torch.Generator().manual_seed(seed)
    n_probes, _, d = xs.shape
    W = (0.01 * torch.randn(n_probes, d, n_classes, generator=gen)).requires_grad_()
    b = torch.zeros(n_probes, 1, n_classes, requires_grad=True)
    opt = torch.optim.Adam([W, b], lr=lr, weight_decay=weight_decay)
    target = train_y.expand(n_probes, -1).reshape(-1)  # (probes * n,)
    with torch.enable_grad():
        for _ in range(steps):
            logits = xs @ W + b  # (probes, n, classes)
            loss = F.cross_entropy(logits.reshape(-1, n_classes), target) * n_probes
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        pred = (xt @ W + b).argmax(-1)  # (probes, m)
        return (pred == test_y).float().mean(-1)


def probe_heads(
    z: Tensor,
    labels: Tensor,
    token_mask: Tensor,
    n_classes: int,
    train_fraction: float = 0.7,
    **fit_kwargs: object,
) -> dict[str, Tensor | float]:
    """Probe every head's output for a per-token label (POS tag, dependency relation...).

    The first ``train_fraction`` of the sentences fit the probes, the rest score them.

    Shapes: z (layers, batch, heads, seq, d_value), labels (batch, seq) ints,
    token_mask (batch, seq) bool -> {"accuracy": (layers, heads), "majority": float}.
    """
    check_tensor("z", z, ndim=5, layout="(layers, batch, heads, seq, d_value)")
    layers, batch, heads, seq, d = z.shape
    check_int_tensor("labels", labels, ndim=2, layout="(batch, seq)")
    check_bool_mask("token_mask", token_mask, meaning="True at the tokens to probe")
    if labels.shape != (batch, seq) or token_mask.shape != (batch, seq):
        raise ValueError(
            f"labels {tuple(labels.shape)} and token_mask {tuple(token_mask.shape)} must both "
            f"be (batch, seq) = ({batch}, {seq}), matching z"
        )
    check_number("train_fraction", train_fraction, 0.0, 1.0, "()")
    cut = int(train_fraction * batch)
    if cut == 0 or cut == batch:
        raise ValueError(f"batch={batch} sentences are too few to split at {train_fraction}")
    feats = z.permute(0, 2, 1, 3, 4).reshape(layers * heads, batch, seq, d)  # (probes, b, s, d)
    tr, te = token_mask.clone(), token_mask.clone()
    tr[cut:], te[:cut] = False, False
    acc = fit_probes(
        feats[:, tr], labels[tr], feats[:, te], labels[te], n_classes, **fit_kwargs
    )  # (probes,)
    return {
        "accuracy": acc.view(layers, heads),
        "majority": majority_accuracy(labels[tr], labels[te]),
    }


def position_features(lengths: Tensor, seq_len: int, *, with_length: bool = False) -> Tensor:
    """Features that hold only where a token stands, for a position-only probe control: the
    one-hot position of each token, and with ``with_length`` also the one-hot length of its
    sentence. A probe on them reads no word; whatever it recovers is position (and length).
    The layout is that of ``z`` with one layer and one head, so ``probe_heads`` takes it.

    Shapes: lengths (batch,) ints in [1, seq_len] -> (1, batch, 1, seq_len, d) float, with
    d = seq_len, or 2 * seq_len with the length.
    """
    seq_len = check_positive_int("seq_len", seq_len)
    check_int_tensor("lengths", lengths, ndim=1, nonempty=True, layout="(batch,) lengths")
    check_bool("with_length", with_length)
    if lengths.min() < 1 or lengths.max() > seq_len:
        raise ValueError(f"lengths must lie in [1, seq_len={seq_len}]; pad to the longest")
    batch = len(lengths)
    pos = torch.eye(seq_len)[None].expand(batch, -1, -1)  # (batch, seq, seq_len)
    if with_length:
        length = F.one_hot(lengths.long() - 1, seq_len).float()  # (batch, seq_len)
        pos = torch.cat([pos, length[:, None, :].expand(-1, seq_len, -1)], dim=-1)
    return pos[None, :, None]  # (1, batch, 1, seq, d)
