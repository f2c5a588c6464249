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

from multihead._checks import check_positive_int


def majority_accuracy(train_labels: Tensor, test_labels: Tensor) -> float:
    """Accuracy on ``test_labels`` of always answering the most common training label.

    Shapes: train_labels (n,), test_labels (m,) integer -> float.
    """
    for name, t in (("train_labels", train_labels), ("test_labels", test_labels)):
        if not isinstance(t, Tensor) or t.is_floating_point() or t.ndim != 1 or not len(t):
            raise ValueError(f"{name} must be a non-empty 1-D integer tensor")
    majority = torch.bincount(train_labels).argmax()
    return (test_labels == majority).float().mean().item()


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
    if train_x.ndim != 3 or test_x.ndim != 3 or train_x.shape[::2] != test_x.shape[::2]:
        raise ValueError(
            f"train_x {tuple(train_x.shape)} and test_x {tuple(test_x.shape)} must be "
            "(probes, tokens, d) with the same probes and d"
        )
    if train_y.shape != train_x.shape[1:2] or test_y.shape != test_x.shape[1:2]:
        raise ValueError("train_y/test_y must have one label per token of train_x/test_x")
    if train_y.min() < 0 or max(train_y.max(), test_y.max()) >= n_classes:
        raise ValueError(f"labels must lie in [0, n_classes={n_classes})")
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
    if z.ndim != 5:
        raise ValueError(f"z must be (layers, batch, heads, seq, d_value), got {tuple(z.shape)}")
    layers, batch, heads, seq, d = z.shape
    if labels.shape != (batch, seq) or token_mask.shape != (batch, seq):
        raise ValueError(
            f"labels {tuple(labels.shape)} and token_mask {tuple(token_mask.shape)} must both "
            f"be (batch, seq) = ({batch}, {seq}), matching z"
        )
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction={train_fraction} must lie strictly between 0 and 1")
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
    if not isinstance(lengths, Tensor) or lengths.is_floating_point() or lengths.ndim != 1:
        raise ValueError("lengths must be a 1-D integer tensor of sentence lengths (batch,)")
    if len(lengths) == 0 or lengths.min() < 1 or lengths.max() > seq_len:
        raise ValueError(f"lengths must lie in [1, seq_len={seq_len}]; pad to the longest")
    batch = len(lengths)
    pos = torch.eye(seq_len)[None].expand(batch, -1, -1)  # (batch, seq, seq_len)
    if with_length:
        length = F.one_hot(lengths.long() - 1, seq_len).float()  # (batch, seq_len)
        pos = torch.cat([pos, length[:, None, :].expand(-1, seq_len, -1)], dim=-1)
    return pos[None, :, None]  # (1, batch, 1, seq, d)
