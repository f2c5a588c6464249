"""The analyses of chapter 12 on small decoders, without the SmolLM2 file: the text windows and
probes, batched pattern statistics against the cache of patterns, a model at initialisation,
decoding timings, the rank of a head's logits, the contrast of grouped heads, the role scores,
first-order patching and the pruning curve's stop."""

import math

import pytest
import torch
import torch.nn.functional as F

from multihead.analysis import circuits, diversity, headrank
from multihead.core.decoder import Decoder
from multihead.core.hooks import run_with_cache, stack_layers
from multihead.interventions import patching
from multihead.interventions.pruning import iterative_pruning
from multihead.pretrained import smollm_heads as probes

LLAMA = {"positions": "rotary", "mlp": "swiglu", "norm": "rms", "bias": False}


class FakeTokenizer:
    """Characters as tokens, ids 3 and up; 0 to 2 are special."""

    all_special_ids = [0, 1, 2]

    def __len__(self):
        return 3 + 128

    def __call__(self, text, add_special_tokens=False, verbose=False):
        return {"input_ids": [3 + min(ord(c), 127) for c in text]}


def _llama(n_kv=2, seed=0):
    torch.manual_seed(seed)
    return Decoder(40, 64, 16, 2, 4, n_kv_heads=n_kv, d_ff=24, tie_embeddings=True, **LLAMA).eval()


def test_the_docs_and_their_windows():
    text = probes.python_docs()
    assert len(text) > 100_000 and "assert" in text
    tok = FakeTokenizer()
    w = probes.text_windows(tok, 50, 7, seed=3)
    assert w.shape == (7, 50) and w.dtype == torch.long
    assert torch.equal(w, probes.text_windows(tok, 50, 7, seed=3))  # the seed decides
    assert not torch.equal(w, probes.text_windows(tok, 50, 7, seed=4))
    ids = probes.docs_token_ids(tok)
    starts = [
        next(i for i in range(0, len(ids), 50) if torch.equal(ids[i : i + 50], row)) for row in w
    ]
    assert len(set(starts)) == 7  # distinct windows on the cut
    with pytest.raises(ValueError, match="more than the text holds"):
        probes.text_windows(tok, 10**6, 2)
    with pytest.raises(TypeError, match="tokenizer must be"):
        probes.text_windows("gpt2", 50, 2)
    with pytest.raises(ValueError, match="length"):
        probes.text_windows(tok, 0, 2)


def test_the_repeated_probes_and_their_control():
    rep, ctl = probes.repeated_tokens(FakeTokenizer(), 5, 6, seed=1)
    assert rep.shape == ctl.shape == (5, 12)
    assert torch.equal(rep[:, :6], rep[:, 6:]) and torch.equal(ctl[:, 6:], rep[:, 6:])
    assert not torch.equal(ctl[:, :6], rep[:, :6])
    assert int(rep.min()) >= 3 and int(rep.max()) < len(FakeTokenizer())  # no special token
    with pytest.raises(ValueError, match="segment"):
        probes.repeated_tokens(FakeTokenizer(), 5, 1)


def test_pattern_statistics_equal_the_cache_of_patterns():
    model = _llama()
    x = torch.randint(3, 40, (5, 10), generator=torch.Generator().manual_seed(2))
    stats = probes.pattern_statistics(
        model,
        x,
        {"prev": circuits.previous_token_score},
        scores={"block": headrank.visible_block},
        losses=True,
        batch_size=2,
    )
    logits, cache = run_with_cache(model, x)
    pattern = stack_layers(cache, "layers.{}.attn.pattern")  # (layers, batch, heads, n, n)
    scores = stack_layers(cache, "layers.{}.attn.scores")
    assert torch.allclose(stats["prev"], circuits.previous_token_score(pattern), atol=1e-6)
    assert torch.allclose(stats["block"], headrank.visible_block(scores), atol=1e-5)
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none")
    assert torch.allclose(stats["loss"], loss, atol=1e-5)
    assert torch.equal(stats["correct"], (logits[:, :-1].argmax(-1) == x[:, 1:]).float())
    assert torch.allclose(probes.token_losses(model, x, batch_size=3), loss, atol=1e-5)
    with pytest.raises(ValueError, match="taken"):
        probes.pattern_statistics(model, x, {"loss": circuits.previous_token_score})
    with pytest.raises(TypeError, match="tokens must be"):
        probes.pattern_statistics(model, x.float(), {"p": circuits.previous_token_score})
    with pytest.raises(ValueError, match="at least one statistic"):
        probes.pattern_statistics(model, x, {})


def test_a_model_of_the_same_shape_at_initialisation():
    model = _llama(n_kv=1)
    fresh = probes.initialised_like(model, seed=5)
    assert fresh.cache_shape() == model.cache_shape()
    assert sum(p.numel() for p in fresh.parameters()) == sum(p.numel() for p in model.parameters())
    assert fresh.unembed.weight is fresh.embed.weight
    assert not torch.equal(fresh.embed.weight, model.embed.weight)
    x = torch.randint(40, (2, 7))
    assert fresh(x).shape == model(x).shape
    with pytest.raises(ValueError, match="Llama family"):
        probes.initialised_like(Decoder(40, 64, 16, 2, 4))
    with pytest.raises(TypeError, match="Decoder"):
        probes.initialised_like(torch.nn.Linear(2, 2))


def test_decode_timings_report_every_context():
    model = _llama()
    out = probes.decode_timings(model, [4, 20], steps=2, rounds=2)
    assert set(out["step_seconds"]) == {4, 20}
    assert all(s > 0 for s in out["step_seconds"].values()) and out["bandwidth"] > 0
    assert out["weight_bytes"] == sum(p.numel() * 4 for p in model.parameters())
    with pytest.raises(ValueError, match="contexts"):
        probes.decode_timings(model, [63], steps=2)
    with pytest.raises(TypeError, match="contexts"):
        probes.decode_timings(model, [])


def test_the_visible_block_of_a_causal_head_has_rank_at_most_its_key_size():
    """thm-logit-rank, on a causal rotary head: the row-centred visible block of the scores
    (= of the log-pattern) has at most d_k nonzero singular values."""
    model = _llama()
    x = torch.randint(40, (3, 40), generator=torch.Generator().manual_seed(0))
    _, cache = run_with_cache(model.double(), x)
    scores, pattern = cache["layers.1.attn.scores"], cache["layers.1.attn.pattern"]
    block = headrank.visible_block(scores)  # (3, 4, 20, 20), d_k = 4
    sv = headrank.centred_singular_values(block)
    assert sv.shape == (3, 4, 20)
    assert bool((sv[..., 4] < 1e-10 * sv[..., 0]).all()) and bool((sv[..., 3] > 1e-6).all())
    log_block = headrank.visible_block(pattern.log())  # the log-pattern, same centred block
    assert torch.allclose(headrank.centred_singular_values(log_block), sv, atol=1e-8)
    need = headrank.needed_rank(block, [1e-9, 0.5, 1e9])
    assert need.shape == (3, 4, 3)
    assert bool((need[..., 0] == 4).all()) and bool((need[..., 2] == 0).all())
    assert bool((need[..., 1] <= need[..., 0]).all())
    with pytest.raises(ValueError, match="masked"):
        headrank.visible_block(torch.full((4, 4), float("-inf")))
    with pytest.raises(ValueError, match="even"):
        headrank.visible_block(scores[..., :-1, :-1])
    with pytest.raises(ValueError, match="tolerances"):
        headrank.needed_rank(block, [0.0])


def test_needed_rank_is_the_smallest_truncation_within_the_tolerance():
    g = torch.Generator().manual_seed(3)
    block = torch.randn(9, 3, dtype=torch.float64, generator=g) @ torch.randn(
        3, 9, dtype=torch.float64, generator=g
    )
    centred = block - block.mean(-1, keepdim=True)
    U, S, Vh = torch.linalg.svd(centred)
    for tol in (0.05, 0.3, 1.0, 3.0):
        r = int(headrank.needed_rank(block, [tol])[0])
        err = [float((centred - (U[:, :k] * S[:k]) @ Vh[:k]).abs().max()) for k in range(10)]
        assert err[r] <= tol and (r == 0 or err[r - 1] > tol)
    assert int(headrank.needed_rank(torch.ones(4, 4), [1e-9])[0]) == 0  # constant rows


def test_group_contrast_of_known_distances():
    heads = 6
    same = torch.arange(heads)[:, None] // 3 == torch.arange(heads)[None, :] // 3
    d = torch.where(same, 0.0, 1.0)  # groups of 3 identical heads, other pairs at 1
    out = diversity.group_contrast(d[None], 3)
    assert torch.allclose(out["within"], torch.zeros(1)) and torch.allclose(
        out["contrast"], torch.ones(1)
    )
    from itertools import combinations

    exact = []  # every grouping of the 6 heads into two groups of 3
    for first in combinations(range(heads), 3):
        labels = torch.tensor([0 if h in first else 1 for h in range(heads)])
        grouped = labels[:, None] == labels[None, :]
        off = grouped & ~torch.eye(heads, dtype=torch.bool)
        exact.append(1 - float(d[off].mean()) / float(d[~grouped].mean()))
    assert abs(float(out["chance"]) - sum(exact) / len(exact)) < 0.1
    flat = torch.ones(2, heads, heads) - torch.eye(heads)  # every pair alike
    assert torch.allclose(diversity.group_contrast(flat, 2)["contrast"], torch.zeros(2))
    g = torch.Generator().manual_seed(0)
    rand = torch.rand(200, heads, heads, generator=g)
    rand = (rand + rand.transpose(1, 2)) / 2
    assert abs(float(diversity.group_contrast(rand, 3, draws=50)["chance"].mean())) < 0.05
    with pytest.raises(ValueError, match="group_size"):
        diversity.group_contrast(d, 4)
    with pytest.raises(ValueError, match="group_size"):
        diversity.group_contrast(d, 6)


def test_role_scores_of_known_patterns():
    n, s = 10, 5
    dup = torch.zeros(n, n)
    dup[:, 0] = 1.0
    q = torch.arange(s, n)
    dup[q] = 0.0
    dup[q, q - s] = 1.0
    assert float(circuits.duplicate_token_score(dup, s)) == 1.0
    assert float(circuits.induction_score(dup, s)) == 0.0
    first = torch.zeros(n, n)
    first[:, 0] = 1.0
    assert float(circuits.first_token_score(first)) == 1.0
    uniform = torch.ones(n, n).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    share = circuits.uniform_causal_share(n)
    assert math.isclose(float(circuits.first_token_score(uniform)), share, rel_tol=1e-6)
    assert math.isclose(float(circuits.previous_token_score(uniform)), share, rel_tol=1e-6)
    with pytest.raises(ValueError, match="prefix"):
        circuits.duplicate_token_score(dup, 6)
    with pytest.raises(ValueError, match="n="):
        circuits.uniform_causal_share(1)


def test_copy_scores_read_the_second_copy():
    s, vocab = 4, 6
    tokens = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4]])
    logits = torch.full((1, 8, vocab), -10.0)
    logits[0, torch.arange(7), tokens[0, 1:]] = 10.0  # right everywhere
    logits[0, 4, 0] = 30.0  # wrong at the first target of the second copy
    out = circuits.copy_scores(logits, tokens, s)
    assert math.isclose(float(out["accuracy"]), 2 / 3, rel_tol=1e-6)
    assert out["loss"].shape == (1,)
    with pytest.raises(ValueError, match="prefix"):
        circuits.copy_scores(logits, tokens, 5)


def _linear_model():
    """One attention-only layer without norms: the logits are linear in every head's z."""
    torch.manual_seed(1)
    return Decoder(12, 8, 16, 1, 4, n_kv_heads=2, mlp=False, norm=False).double().eval()


def test_first_order_patching_is_exact_for_a_metric_linear_in_the_heads():
    model = _linear_model()
    g = torch.Generator().manual_seed(4)
    clean = torch.randint(12, (5, 8), generator=g)
    corrupted = clean.clone()
    corrupted[:, 2] = (clean[:, 2] + 3) % 12

    def metric(logits):
        return logits[:, -1, 3].mean()  # linear in the logits, hence in z

    estimate = patching.first_order_patching(model, clean, corrupted, metric)
    exact = patching.patch_heads(model, clean, corrupted, metric)
    assert estimate.shape == (1, 4)
    assert torch.allclose(estimate.double(), exact.double(), atol=1e-8)
    some = patching.patch_heads(model, clean, corrupted, metric, heads=[(0, 1), (0, 3)])
    assert torch.allclose(some[0, [1, 3]], exact[0, [1, 3]]) and some[0, [0, 2]].isnan().all()
    with pytest.raises(ValueError, match="layers run"):
        patching.patch_heads(model, clean, corrupted, metric, heads=[(1, 0)])
    with pytest.raises(TypeError, match="pairs"):
        patching.patch_heads(model, clean, corrupted, metric, heads=[0])
    with pytest.raises(ValueError, match="nothing to recover"):
        patching.first_order_patching(model, clean, clean, metric)


def test_first_order_mean_ablation_is_exact_for_a_linear_metric():
    model = _linear_model()
    x = torch.randint(12, (5, 8), generator=torch.Generator().manual_seed(5))

    def metric(logits):
        return logits[:, :, 2].mean()

    means = patching.head_means(model, x)
    estimate = patching.first_order_ablation(model, x, metric, means=means)
    base = float(metric(model(x)).detach())
    for head in range(4):
        with torch.no_grad(), patching.ablated(model, {"layers.0.attn.z": [head]}, means):
            assert math.isclose(float(metric(model(x))) - base, float(estimate[0, head]),
                                abs_tol=1e-8)  # fmt: skip
    with pytest.raises(ValueError, match="means"):
        patching.first_order_ablation(model, x, metric, means={})


def test_pruning_stops_at_until():
    model = _llama()
    x = torch.randint(40, (3, 9))

    def evaluate(m):
        with torch.no_grad():
            return {"loss": float(F.cross_entropy(m(x)[:, :-1].transpose(1, 2), x[:, 1:]))}

    curve = iterative_pruning(model, evaluate, fraction_per_step=0.25, until=0.5, seed=1)
    assert curve.fraction == [0.0, 0.25, 0.5]
    with pytest.raises(ValueError, match="until"):
        iterative_pruning(model, evaluate, until=0.0)
