"""Reference answers to the coding exercises, for the tests only.

They live outside the package on purpose: a student's ``import multihead`` cannot reach them.
Each name is the name of the function a notebook's exercise stub asks for, so
``tests/test_exercise_stubs.py`` can put the answer in place of the stub and run the
checker call as the notebook writes it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Chapter 1


def my_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n_q, n_k)
    if mask is None:
        return scores.softmax(dim=-1) @ v
    empty = mask.all(dim=-1, keepdim=True)  # queries that may look at nothing
    scores = scores.masked_fill(mask, float("-inf")).masked_fill(empty, 0.0)
    return scores.softmax(dim=-1).masked_fill(empty, 0.0) @ v


def n_params(d_model, n_heads, d_key, d_value):
    weights = n_heads * d_model * (2 * d_key + d_value) + n_heads * d_value * d_model
    biases = n_heads * (2 * d_key + d_value) + d_model
    return weights + biases


def flops(d_model, n_heads, d_key, d_value, n):
    return 2 * (
        n * d_model * n_heads * (2 * d_key + d_value)
        + n_heads * n * n * (d_key + d_value)
        + n * n_heads * d_value * d_model
    )


class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        h, d, dh = n_heads, d_model, d_model // n_heads
        self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.randn(h, d, dh) / d**0.5) for _ in "qkv")
        self.W_O = nn.Parameter(torch.randn(h, dh, d) / d**0.5)
        self.b_Q, self.b_K, self.b_V = (nn.Parameter(torch.zeros(h, dh)) for _ in "qkv")
        self.b_O = nn.Parameter(torch.zeros(d))

    def forward(self, x, key_padding_mask=None, causal=False):
        n = x.shape[1]
        # (batch, seq, d_model) x (heads, d_model, d_head) -> (batch, heads, seq, d_head)
        q = torch.einsum("bsd,hde->bhse", x, self.W_Q) + self.b_Q[:, None, :]
        k = torch.einsum("bsd,hde->bhse", x, self.W_K) + self.b_K[:, None, :]
        v = torch.einsum("bsd,hde->bhse", x, self.W_V) + self.b_V[:, None, :]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (batch, heads, q, k)
        mask = torch.zeros(1, 1, n, n, dtype=torch.bool)
        if key_padding_mask is not None:
            mask = mask | key_padding_mask[:, None, None, :]  # (batch, 1, 1, key)
        if causal:
            mask = mask | torch.ones(n, n, dtype=torch.bool).triu(1)
        empty = mask.all(dim=-1, keepdim=True)  # queries that may look at nothing
        scores = scores.masked_fill(mask, float("-inf")).masked_fill(empty, 0.0)
        pattern = scores.softmax(dim=-1).masked_fill(empty, 0.0)
        z = pattern @ v  # (batch, heads, seq, d_head)
        return torch.einsum("bhse,hed->bsd", z, self.W_O) + self.b_O


# Chapter 2


def my_swap(attn, i, j):
    with torch.no_grad():
        for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O"):
            p = getattr(attn, name)
            p[[i, j]] = p[[j, i]]


def value_grad(X, A, G, W_O_i):
    return X.T @ A.T @ G @ W_O_i.T


# Chapter 3


def bert_large_extra_params():
    return 24 * 2 * (1024 * 1024 + 1024)


def realize_rows(X, P):
    n = X.shape[0]
    X_right = X.T @ torch.linalg.inv(X @ X.T)  # (d, n), X @ X_right = I_n
    W_tilde = math.sqrt(n) * torch.log(P)  # D0 = I, d_k = n
    return X_right @ W_tilde, X_right


def my_min_key_size(P, rtol=1e-8):
    C = torch.log(P)
    C = C - C.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(C)
    return 0 if s[0] == 0 else int((s > rtol * s[0]).sum())


# Chapter 4


def post_mix(pattern, P_w):
    return torch.einsum("bjqk,jm->bmqk", pattern, P_w)


def invisible(h):
    perm = torch.eye(h)[torch.roll(torch.arange(h), 1)]
    return perm, perm.T


def extra_flops(n_heads, n):
    return 2 * (2 * n * n * n_heads * n_heads)


# Chapter 5


def my_confidence(pattern, query_mask):
    top = pattern.amax(dim=-1)  # (batch, heads, query)
    w = query_mask[:, None, :].to(top.dtype)
    return (top * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2))


def my_share(pattern, offset):
    n = pattern.shape[-1]
    idx = torch.arange(n)
    valid = (idx + offset >= 0) & (idx + offset < n)
    hit = (pattern.argmax(-1) == idx + offset) & valid
    return hit.float().sum(dim=(0, 2)) / (valid.sum() * pattern.shape[0])


def find_subject_head(pattern, gold):
    from multihead.analysis.roles import syntactic

    acc = syntactic(pattern, gold, "nsubj", "head->dep")["accuracy"]  # (layers, heads)
    return divmod(int(acc.argmax()), acc.shape[1])


# Chapter 6


def my_spread(distances):
    heads = distances.shape[1]
    return distances.sum(dim=(1, 2)) / (heads * (heads - 1))


def my_distinctness(distances):
    heads = distances.shape[1]
    return distances.sum(dim=2) / (heads - 1)


def my_bound(scores_a, scores_b):
    diff = scores_a - scores_b
    r = diff.amax(-1) - diff.amin(-1)
    return math.log(2) - torch.log1p(torch.exp(-r))


# Chapter 7


def sample(log_alpha, u, beta, gamma, zeta):
    logistic = torch.log(u) - torch.log1p(-u)
    s = torch.sigmoid((logistic + log_alpha) / beta)
    return (gamma + (zeta - gamma) * s).clamp(0.0, 1.0)


def my_expected_l0(log_alpha, beta, gamma, zeta):
    return torch.sigmoid(log_alpha - beta * math.log(-gamma / zeta)).sum()


def my_importance(z, grad_z):
    return (z * grad_z).sum(dim=(2, 3)).abs().mean(0)


# Chapter 8


def rescale(keep):
    h = keep.shape[1]
    return keep.float() * h / keep.sum(dim=1, keepdim=True)


def gate_variance(h, p):
    e = sum(math.comb(h, k) * (1 - p) ** k * p ** (h - k) / max(k, 1) for k in range(h + 1))
    return h * e - 1


def v_rate(step, total, p, turn):
    if step < turn:
        return p * (1 - step / turn)
    return p * (step - turn) / (total - 1 - turn)


# Chapter 9


def my_js(p, q):
    m = (p + q) / 2
    kl_pm = torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(p, m).sum(-1)
    kl_qm = torch.special.xlogy(q, q).sum(-1) - torch.special.xlogy(q, m).sum(-1)
    return (kl_pm + kl_qm) / 2


def my_word_level(p, word_of_token, n_words):
    A = torch.nn.functional.one_hot(word_of_token, n_words).to(p.dtype)  # (tokens, words)
    return (A.T @ p @ A) / A.sum(0)[:, None]


def my_mds(d, dim):
    n = d.shape[0]
    J = torch.eye(n, dtype=torch.float64) - 1.0 / n
    B = -J @ (d.double() ** 2) @ J / 2
    vals, vecs = torch.linalg.eigh(B)
    vals, vecs = vals.flip(0)[:dim], vecs.flip(1)[:, :dim]
    return vecs * vals.clamp_min(0).sqrt()


# --- the primer -----------------------------------------------------------------------------


def my_positions(n, d_model):
    t = torch.arange(n, dtype=torch.float64)[:, None]  # (n, 1)
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(t * w), torch.cos(t * w)
    return pe


def my_causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)  # True = blocked: keys after the query


def my_prenorm_block(layer, x):
    h = x + layer.attn(layer.norms[0](x))
    return h + layer.mlp(layer.norms[1](h))


# --- chapter 10 -----------------------------------------------------------------------------


def llama3_cache_bytes():
    return 2 * 32 * 8 * 128 * 2 * 8192  # keys and values x layers x kv heads x d_head x bytes


def group_kv(k, n_heads):
    kv_heads = k.shape[1]
    if n_heads % kv_heads:
        raise ValueError(f"n_heads={n_heads} must be a multiple of {kv_heads} key/value heads")
    return k.repeat_interleave(n_heads // kv_heads, dim=1)  # (batch, n_heads, seq, d_head)


def online_step(mu, ell, o, s, v):
    new_mu = torch.maximum(mu, s.max(dim=-1).values)  # (q,)
    safe = torch.where(torch.isinf(new_mu), torch.zeros_like(new_mu), new_mu)
    scale = torch.where(torch.isinf(mu), torch.zeros_like(mu), torch.exp(mu - safe))
    w = torch.exp(s - safe[:, None])  # (q, tile); masked scores give 0
    return new_mu, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


def absorbed_scores(x_query, W_Q, W_UK, latents):
    q_tilde = x_query @ W_Q @ W_UK.T  # (q, d_latent): the absorbed queries
    return q_tilde @ latents.T / math.sqrt(W_Q.shape[1])  # (q, n)


def decode_step(x, k_cache, v_cache, W_Q, W_K, W_V):
    q, k, v = x @ W_Q, x @ W_K, x @ W_V  # (batch, d_head) each
    k_cache = torch.cat([k_cache, k[:, None]], dim=1)  # (batch, t + 1, d_head)
    v_cache = torch.cat([v_cache, v[:, None]], dim=1)
    weights = (q[:, None] @ k_cache.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
    return (weights @ v_cache)[:, 0], k_cache, v_cache


# --- chapter 11 -----------------------------------------------------------------------------


def rope(x, position, base=10000.0):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)  # (d/2,)
    c, s = torch.cos(position * theta), torch.sin(position * theta)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def prefix_matching(pattern, L):
    queries = torch.arange(L, 2 * L)
    return pattern[queries, queries - L + 1].mean()


def recovered(m_clean, m_corrupted, m_patched):
    return (m_patched - m_corrupted) / (m_clean - m_corrupted)


def patch_head(model, clean, corrupted, metric, layer, head):
    from multihead import run_with_cache, run_with_hooks

    name = f"layers.{layer}.attn.z"
    clean_logits, cache = run_with_cache(model, clean, names_filter=[name])
    clean_z = cache[name]

    def put(z, _name):
        z = z.clone()
        z[:, head] = clean_z[:, head]
        return z

    m_clean, m_bad = metric(clean_logits), metric(model(corrupted))
    m_patched = metric(run_with_hooks(model, corrupted, fwd_hooks=[(name, put)]))
    return float((m_patched - m_bad) / (m_clean - m_bad))


def build_induction(vocab_size, seq_len, beta=20.0, gamma=20.0):
    from multihead.core.decoder import Decoder

    V, n = vocab_size, seq_len
    tok, pos, prev, out = (
        slice(0, V),
        slice(V, V + n),
        slice(V + n, 2 * V + n),
        slice(2 * V + n, 3 * V + n),
    )
    model = Decoder(V, n, 3 * V + n, 2, 1, d_head=max(V, n), mlp=False, norm=False)
    scale = math.sqrt(max(V, n))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.weight[:, tok] = torch.eye(V)
        model.pos.weight[:, pos] = torch.eye(n)
        a0, a1 = model.layers[0].attn, model.layers[1].attn
        a0.W_Q[0, pos, :n] = beta * scale * torch.eye(n)
        a0.W_K[0, pos, :n] = torch.eye(n).roll(1, dims=1)
        a0.W_V[0, tok, :V] = torch.eye(V)
        a0.W_O[0, :V, prev] = torch.eye(V)
        a1.W_Q[0, tok, :V] = gamma * scale * torch.eye(V)
        a1.W_K[0, prev, :V] = torch.eye(V)
        a1.W_V[0, tok, :V] = torch.eye(V)
        a1.W_O[0, :V, out] = torch.eye(V)
        model.unembed.weight[:, out] = torch.eye(V)
    return model


# Chapter 12


def smollm2_cache_bytes():
    return 2 * 30 * 3 * 64 * 2 * 8192  # keys and values, layers, key/value heads, size, bytes


def find_induction_heads(patterns, segment, threshold=0.5):
    q = torch.arange(segment, 2 * segment)  # the second copy's queries
    score = patterns[..., q, q - segment + 1].mean(-1).mean(1)  # (layers, heads)
    return [tuple(x) for x in (score > threshold).nonzero().tolist()]


def mean_pool_kv(W, new_kv):
    n_kv = W.shape[0]
    if new_kv < 1 or n_kv % new_kv:
        raise ValueError(f"new_kv={new_kv} must divide the {n_kv} key/value heads")
    return W.view(new_kv, n_kv // new_kv, *W.shape[1:]).mean(1)


def head_needed_rank(scores, tol):
    n = scores.shape[-1]
    block = scores[n // 2 :, : n // 2].double()  # every query sees every key here
    block = block - block.mean(-1, keepdim=True)
    U, S, Vh = torch.linalg.svd(block)
    for r in range(len(S) + 1):
        if (block - (U[:, :r] * S[:r]) @ Vh[:r]).abs().max() <= tol:
            return r
    return len(S)
