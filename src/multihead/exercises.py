"""Checkers for the exercises. Each takes the reader's answer, tests it against the
course's reference on fresh inputs, prints one line on success and raises
``AssertionError`` with a hint otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.attention import MultiHeadAttention, attention_pattern
from multihead.model import count_parameters


def _ok(message: str) -> str:
    line = f"Correct: {message}"
    print(line)
    return line


def _require_callable(name: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be a function, got {type(fn).__name__}")


# ---------------------------------------------------------------------------------
# Chapter 1: multi-head attention from scratch
# ---------------------------------------------------------------------------------
def check_attention(fn: Callable) -> str:
    """Check ``fn(q, k, v, mask=None)``: scaled dot-product attention.

    ``mask`` is boolean, True where a query may not look. Any leading batch dimensions.

    Shapes: q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).
    """
    _require_callable("fn", fn)
    gen = torch.Generator().manual_seed(1234)
    for shape_q, shape_k, d_v in (((5, 4), (7, 4), 3), ((2, 3, 6, 8), (2, 3, 6, 8), 5)):
        q = torch.randn(*shape_q, generator=gen, dtype=torch.float64)
        k = torch.randn(*shape_k, generator=gen, dtype=torch.float64)
        v = torch.randn(*shape_k[:-1], d_v, generator=gen, dtype=torch.float64)
        n_q, n_k = shape_q[-2], shape_k[-2]
        causal = torch.ones(n_q, n_k, dtype=torch.bool).triu(1) if n_q == n_k else None
        for mask in (None,) if causal is None else (None, causal):
            want = attention_pattern(q, k, mask) @ v
            got = fn(q, k, v) if mask is None else fn(q, k, v, mask=mask)
            if not isinstance(got, torch.Tensor):
                raise AssertionError(f"return a tensor, got {type(got).__name__}")
            if got.shape != want.shape:
                raise AssertionError(
                    f"output shape {tuple(got.shape)}, expected {tuple(want.shape)}"
                )
            err = (got.double() - want).abs().max().item()
            if err > 1e-6:
                hint = (
                    "masked keys must get exactly zero weight (fill their scores with -inf)"
                    if mask is not None
                    else "did you divide the scores by sqrt(d_k) and softmax over the keys?"
                )
                raise AssertionError(f"max difference {err:.2e} from the reference; {hint}")
    return _ok("your attention matches the reference, with and without a mask.")


def check_mha_parameter_count(fn: Callable) -> str:
    """Check ``fn(d_model, n_heads, d_key, d_value) -> int``: parameters of one MHA layer,
    biases included (as ``MultiHeadAttention`` with ``bias=True``).

    Shapes: none.
    """
    _require_callable("fn", fn)
    for d_model, h, d_k, d_v in (
        (64, 4, 16, 16),
        (128, 8, 32, 8),
        (96, 3, 7, 11),
        (512, 8, 64, 64),
    ):
        want = count_parameters(MultiHeadAttention(d_model, h, d_k, d_v))
        got = fn(d_model, h, d_k, d_v)
        if got != want:
            raise AssertionError(
                f"for d_model={d_model}, n_heads={h}, d_key={d_k}, d_value={d_v} you gave "
                f"{got}, expected {want}. Count W_Q, W_K, W_V, W_O and the four biases."
            )
    return _ok("your formula counts every weight and bias.")


def mha_flops(d_model: int, n_heads: int, d_key: int, d_value: int, n: int) -> int:
    """Reference FLOPs (2 per multiply-add) of the matrix products in one self-attention
    forward pass over ``n`` tokens (softmax, biases and scaling not counted).

    Shapes: none.
    """
    projections = n * d_model * n_heads * (2 * d_key + d_value)
    scores_and_mixing = n_heads * n * n * (d_key + d_value)
    output = n * n_heads * d_value * d_model
    return 2 * (projections + scores_and_mixing + output)


def check_mha_flops(fn: Callable) -> str:
    """Check ``fn(d_model, n_heads, d_key, d_value, n) -> int``: matmul FLOPs of one
    self-attention forward pass over ``n`` tokens, counting 2 FLOPs per multiply-add.

    Shapes: none.
    """
    _require_callable("fn", fn)
    cases = ((64, 4, 16, 16, 10), (128, 8, 32, 8, 50), (96, 3, 7, 11, 33), (512, 8, 64, 64, 512))
    for d_model, h, d_k, d_v, n in cases:
        want = mha_flops(d_model, h, d_k, d_v, n)
        got = fn(d_model, h, d_k, d_v, n)
        if got != want:
            terms = "the Q/K/V projections, Q K^T, the weighted sum of values and W_O"
            raise AssertionError(
                f"for d_model={d_model}, n_heads={h}, d_key={d_k}, d_value={d_v}, n={n} you "
                f"gave {got}, expected {want}. Count {terms}, 2 FLOPs per multiply-add."
            )
    return _ok("your FLOP count matches, and grows like n^2 only through Q K^T and P V.")


# ---------------------------------------------------------------------------------
# Chapter 3: the low-rank bottleneck
# ---------------------------------------------------------------------------------
def _row_pattern(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """Row convention: tokens are rows of X (n, d); pattern (query, key), rows sum to 1."""
    d_k = W_Q.shape[-1]
    return ((X @ W_Q) @ (X @ W_K).T / d_k**0.5).softmax(dim=-1)


def check_realize_rows(fn: Callable) -> str:
    """Check ``fn(X, P) -> (W_Q, W_K)``: the expressivity theorem in the row convention.

    ``X`` holds the tokens as rows, ``P`` is positive and row-stochastic (query, key); the
    answer must satisfy ``softmax((X W_Q)(X W_K)^T / sqrt(d_k), dim=-1) == P``.

    Shapes: X (n, d) with d >= n, P (n, n) -> W_Q (d, d_k), W_K (d, d_k), d_k >= n.
    """
    _require_callable("fn", fn)
    gen = torch.Generator().manual_seed(31)
    for n, d in ((3, 3), (5, 8), (8, 8), (6, 20)):
        X = torch.randn(n, d, generator=gen, dtype=torch.float64)
        P = (2 * torch.randn(n, n, generator=gen, dtype=torch.float64)).softmax(dim=-1)
        got = fn(X.clone(), P.clone())
        if not isinstance(got, tuple) or len(got) != 2:
            raise AssertionError("return a tuple (W_Q, W_K)")
        W_Q, W_K = got
        if not all(isinstance(W, torch.Tensor) for W in got):
            raise AssertionError("W_Q and W_K must be tensors")
        if W_Q.shape != W_K.shape or W_Q.ndim != 2 or W_Q.shape[0] != d:
            raise AssertionError(
                f"W_Q and W_K must both be (d, d_k) = ({d}, d_k); got {tuple(W_Q.shape)} "
                f"and {tuple(W_K.shape)}. In the row convention the weights act on the right"
            )
        if W_Q.shape[1] < n:
            raise AssertionError(
                f"d_k={W_Q.shape[1]} < n={n}: the expressivity theorem needs d_k >= n"
            )
        A = _row_pattern(X, W_Q.double(), W_K.double())
        err = (A - P).abs().max().item()
        if err > 1e-8:
            hint = (
                "use the right inverse X^T (X X^T)^{-1} of the row matrix X and target "
                "logits sqrt(d_k) log(D0 P) (queries index the rows, keys the columns; "
                "the sqrt(d_k) must cancel)"
            )
            raise AssertionError(f"for n={n}, d={d} the pattern is off by {err:.2e}; {hint}")
    return _ok("your weights reproduce every row-stochastic target exactly.")


def check_min_key_size(fn: Callable) -> str:
    """Check ``fn(P) -> int``: the smallest key size of one head producing ``P``.

    ``P`` is positive and column-stochastic (column convention, ``P[key, query]``).

    Shapes: P (n, n) -> int.
    """
    from multihead.lowrank import column_softmax, min_key_size

    _require_callable("fn", fn)
    gen = torch.Generator().manual_seed(32)
    for n, r in ((5, 0), (5, 1), (6, 3), (8, 7), (9, 4)):
        L = torch.randn(n, r, generator=gen, dtype=torch.float64) @ torch.randn(
            r, n, generator=gen, dtype=torch.float64
        )
        shift = 3 * torch.randn(1, n, generator=gen, dtype=torch.float64)  # per-column
        P = column_softmax(L + shift)
        want = min_key_size(P)
        got = fn(P.clone())
        if isinstance(got, torch.Tensor):
            got = got.item()
        if got != want:
            if got == want + 1:
                hint = (
                    "rank(log P) counts the per-column constant that softmax forgets; "
                    "subtract each column's mean first"
                )
            else:
                hint = "compute the rank of log P after centring its columns"
            raise AssertionError(f"for a {n} x {n} P you gave {got}, expected {want}; {hint}")
    return _ok("you found the exact rank criterion of the chapter.")


def check_bert_large_extra_params(answer: object) -> str:
    """Check the number of extra parameters of BERT-large with ``d_key = 128``.

    BERT-large: 24 layers, ``d_model = 1024``, 16 heads of size 64; only the query and key
    projections (weights and biases) grow, values keep 64 per head.

    Shapes: none.
    """
    from multihead.lowrank import attention_cost

    per_layer = (
        attention_cost(1024, 16, 128, 64, seq_len=1)["params"]
        - attention_cost(1024, 16, 64, 64, seq_len=1)["params"]
    )
    want = 24 * per_layer
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise AssertionError(f"give a number, got {type(answer).__name__}")
    if answer == want:
        return _ok(f"{want:,} extra parameters, about 15% of BERT-large's 340M.")
    if answer == per_layer:
        hint = "that is one layer; BERT-large has 24"
    elif answer == 24 * 2 * 1024 * 1024:
        hint = "you counted the weights; add the biases of W_Q and W_K"
    elif answer == want // 2 or answer == 24 * 1024 * 1024:
        hint = "both W_Q and W_K grow (they must share d_key)"
    else:
        hint = "per layer, W_Q and W_K go from 1024 x 1024 to 1024 x (16 * 128), plus biases"
    raise AssertionError(f"{answer:,} is not right; {hint}")


# ---------------------------------------------------------------------------------
# Chapter 5: head roles
# ---------------------------------------------------------------------------------


def _random_patterns(seed: int, batch: int = 3, heads: int = 4, n: int = 7) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scores = 3 * torch.randn(batch, heads, n, n, generator=gen)
    return scores.softmax(-1)  # (batch, heads, n, n), ties have probability 0


def check_head_confidence(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(pattern, query_mask) -> (heads,)``: the mean over the selected queries of
    each head's largest attention weight (Voita et al.'s confidence)."""
    from multihead.metrics import head_confidence

    _require_callable("fn", fn)
    for seed in range(3):
        p = _random_patterns(seed)
        mask = torch.ones(p.shape[0], p.shape[2], dtype=torch.bool)
        mask[:, -1] = False  # leave out the end token
        mask[0, :3] = False  # and a few more queries, unevenly across the batch
        got = fn(p, mask)
        assert isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}"
        assert got.shape == (p.shape[1],), (
            f"return one number per head, shape ({p.shape[1]},); got {tuple(got.shape)}"
        )
        want = head_confidence(p, mask)
        if not torch.allclose(got, head_confidence(p, mask), atol=1e-5):
            if torch.allclose(got, p.amax(-1).mean(dim=(0, 2)), atol=1e-5):
                raise AssertionError("you averaged over every query: use query_mask")
            raise AssertionError(
                f"expected {want.tolist()}, got {got.tolist()}; take the max over keys (last "
                "dimension), then average over the masked (batch, query) positions together"
            )
    return _ok("your head confidence matches multihead.metrics.head_confidence.")


def _reference_share(pattern: torch.Tensor, offset: int) -> torch.Tensor:
    n = pattern.shape[-1]
    top = pattern.argmax(-1)  # (batch, heads, query)
    idx = torch.arange(n)
    valid = (idx + offset >= 0) & (idx + offset < n)  # (query,)
    hit = (top == (idx + offset)) & valid
    return hit.float().sum(dim=(0, 2)) / (valid.sum() * pattern.shape[0])


def check_positional_share(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(pattern, offset) -> (heads,)``: for each head, the share of queries i
    (among those where key i + offset exists) whose largest weight is on key i + offset."""
    _require_callable("fn", fn)
    n = 6
    idx = torch.arange(n)
    prev = torch.nn.functional.one_hot((idx - 1).clamp(0), n).float()  # previous token
    nxt = torch.nn.functional.one_hot((idx + 1).clamp(max=n - 1), n).float()
    uniform = torch.full((n, n), 1.0 / n)
    cases = [(torch.stack([prev, nxt])[None], o) for o in (-1, 1, 0, 2)]
    cases += [(_random_patterns(s), o) for s, o in ((0, -1), (1, 1), (2, 3))]
    for pattern, offset in cases:
        got = fn(pattern, offset)
        assert isinstance(got, torch.Tensor) and got.shape == (pattern.shape[1],), (
            f"return a tensor with one share per head, shape ({pattern.shape[1]},)"
        )
        want = _reference_share(pattern, offset)
        if not torch.allclose(got.float(), want, atol=1e-5):
            hint = "count only queries i for which 0 <= i + offset < n, in the denominator too"
            raise AssertionError(
                f"offset {offset}: expected {want.tolist()}, got {got.tolist()}; {hint}"
            )
    assert fn(uniform[None, None], -1).shape == (1,)
    return _ok("a perfect previous-token head has share 1 at offset -1.")


def check_subject_head(answer: tuple[int, int], pattern: torch.Tensor, gold: object) -> str:
    """Check that ``answer = (layer, head)`` is the encoder head whose largest weight most
    often lands on the subject when the query is the verb (nsubj, head->dep)."""
    from multihead.roles import syntactic

    acc = syntactic(pattern, gold, "nsubj", "head->dep")["accuracy"]  # (layers, heads)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise AssertionError("answer must be a (layer, head) tuple of two ints")
    layer, head = answer
    if not (0 <= layer < acc.shape[0] and 0 <= head < acc.shape[1]):
        raise AssertionError(f"(layer, head) must lie within {tuple(acc.shape)}")
    best = acc.max().item()
    if acc[layer, head].item() < best - 1e-6:
        raise AssertionError(
            f"head {answer} finds the subject {acc[layer, head]:.0%} of the time, but another "
            f"head reaches {best:.0%}: use the verb as the query and the subject as the target"
        )
    return _ok(f"layer {layer}, head {head} points from the verb to its subject {best:.0%}.")


# ---------------------------------------------------------------------------------
# Chapter 9: the heads of a real pretrained Transformer
# ---------------------------------------------------------------------------------
def check_js_divergence(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(p, q) -> (...)``: the Jensen-Shannon divergence in nats of distributions on
    the last dimension, with 0 log 0 = 0 (rows with zeros must not give nan)."""
    import math

    from multihead.metrics import js_divergence

    _require_callable("fn", fn)
    one_hot = torch.eye(4, dtype=torch.float64)
    cases = [(one_hot[0], one_hot[1]), (one_hot, one_hot.roll(1, 0))]
    cases += [(_random_patterns(s).double(), _random_patterns(s + 10).double()) for s in (0, 1)]
    for p, q in cases:
        got = fn(p, q)
        assert isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}"
        assert got.shape == p.shape[:-1], (
            f"return one value per distribution, shape {tuple(p.shape[:-1])}; got "
            f"{tuple(got.shape)}"
        )
        if torch.isnan(got).any():
            raise AssertionError("got nan: use 0 log 0 = 0 (torch.special.xlogy does this)")
        want = js_divergence(p, q)
        if not torch.allclose(got.double(), want, atol=1e-6):
            if torch.allclose(got.double(), want.sqrt(), atol=1e-6):
                raise AssertionError("that is the JS distance; return the divergence (no sqrt)")
            raise AssertionError(
                f"expected {want.flatten()[:4].tolist()}..., got {got.flatten()[:4].tolist()}...; "
                "JS(p, q) = KL(p || m) / 2 + KL(q || m) / 2 with m = (p + q) / 2, in nats"
            )
    assert abs(float(fn(one_hot[0], one_hot[2])) - math.log(2)) < 1e-6
    return _ok("your JS divergence is log 2 for disjoint supports and matches the reference.")


def check_word_level(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(token_attention, word_of_token, n_words) -> (..., words, words)``:
    attention *to* a word is the sum over its tokens, attention *from* a word the mean."""
    from multihead.pretrained import word_level

    _require_callable("fn", fn)
    cases = [
        (_random_patterns(0, batch=1, heads=2, n=5)[0], torch.tensor([0, 1, 1, 2, 3]), 4),
        (_random_patterns(1, batch=2, heads=3, n=6), torch.tensor([0, 1, 1, 1, 2, 2]), 3),
    ]
    for p, wot, n_words in cases:
        got = fn(p, wot, n_words)
        want = word_level(p, wot, n_words)
        assert isinstance(got, torch.Tensor) and got.shape == want.shape, (
            f"return shape {tuple(want.shape)} (..., words, words)"
        )
        if not torch.allclose(got, want, atol=1e-5):
            rows = got.sum(-1)
            if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
                raise AssertionError(
                    "rows must still sum to 1: sum over the key tokens of a word, but average "
                    "(not sum) over its query tokens"
                )
            raise AssertionError("keys: sum the columns of a word's tokens; queries: average rows")
    return _ok("word-level rows sum to 1 and match multihead.pretrained.word_level.")


def check_classical_mds(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(distances, dim) -> (n, dim)``: classical MDS must reproduce the distances
    of points that really lie in ``dim`` dimensions (up to rotation and reflection)."""
    _require_callable("fn", fn)
    gen = torch.Generator().manual_seed(9)
    for n, dim in ((6, 2), (9, 3)):
        pts = torch.randn(n, dim, generator=gen, dtype=torch.float64)
        d = torch.cdist(pts, pts)
        got = fn(d, dim)
        assert isinstance(got, torch.Tensor) and got.shape == (n, dim), (
            f"return the coordinates, shape ({n}, {dim}); got "
            f"{getattr(got, 'shape', type(got).__name__)}"
        )
        err = (torch.cdist(got.double(), got.double()) - d).abs().max().item()
        if err > 1e-6:
            raise AssertionError(
                f"the distances of your points are off by up to {err:.3g}: double-centre the "
                "*squared* distances, B = -J D**2 J / 2, and scale the top eigenvectors by the "
                "square roots of their eigenvalues"
            )
    return _ok("your MDS reproduces Euclidean distances exactly.")
