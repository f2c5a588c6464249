import math

import pytest
import torch

from multihead.core.attention import GroupedQueryAttention, MultiHeadAttention, project
from multihead.core.cache import KVCache
from multihead.core.convert import regroup
from multihead.core.hooks import run_with_cache
from multihead.core.positions import offset_map, sinusoidal_positions
from multihead.core.rotary import rotary_matrix, rotate


def _vectors(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_rotate_is_the_row_form_of_the_rotary_matrix():
    x = _vectors(2, 3, 5, 8)  # (batch, heads, seq, d_head)
    positions = [0, 1, 7, -3, 250]
    out = rotate(x, positions)
    for j, t in enumerate(positions):
        R = rotary_matrix(t, 8, dtype=torch.float64)
        assert (out[..., j, :] - x[..., j, :] @ R.T).abs().max() < 1e-12
        # R_t is the offset map of chapter 4b's theorem (same frequencies, same pairs)
        assert torch.equal(R, offset_map(t, 8, dtype=torch.float64))
        assert (R @ R.T - torch.eye(8, dtype=torch.float64)).abs().max() < 1e-12
    # column convention: pair (a, b) turns counter-clockwise, (1, 0) -> (cos, sin)
    e0 = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # (seq=1, d_head=4)
    want = torch.tensor([math.cos(2.0), math.sin(2.0)], dtype=torch.float64)
    assert (rotate(e0, [2])[0, :2] - want).abs().max() < 1e-15


def test_rotating_a_sinusoidal_encoding_moves_it_back():
    # rotate(x, [t]) = x R_t^T = x R_{-t}; the theorem PE(s) R_k = PE(s + k) gives PE(s - t)
    pe = sinusoidal_positions(20, 8, dtype=torch.float64)
    moved = rotate(pe[12:13], [5])
    assert (moved - pe[7:8]).abs().max() < 1e-12


def test_scores_depend_only_on_the_offset():
    q, k = _vectors(1, 2, 1, 16, seed=1), _vectors(1, 2, 1, 16, seed=2)

    def score(t, s):
        return (rotate(q, [t]) * rotate(k, [s])).sum(-1)  # (1, 2, 1)

    for offset in (-5, -1, 0, 3, 11):
        reference = score(20, 20 + offset)
        for t in (0, 1, 7, 50, 999):
            if t + offset >= 0:
                assert (score(t, t + offset) - reference).abs().max() < 1e-10, (t, offset)
    assert (score(0, 1) - score(0, 2)).abs().max() > 1e-3  # the offset does matter


def test_position_zero_is_exactly_the_identity():
    for dtype in (torch.float32, torch.float64):
        x = _vectors(2, 3, 4, 6).to(dtype)
        assert torch.equal(rotate(x[..., :1, :], [0]), x[..., :1, :])
        assert torch.equal(rotate(x, torch.zeros(4, dtype=torch.long)), x)
    assert torch.equal(rotary_matrix(0, 6), torch.eye(6))


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="d_head"):
        rotate(torch.zeros(1, 2, 3, 5), [0, 1, 2])
    with pytest.raises(ValueError, match="d_head"):
        rotary_matrix(1, 7)
    with pytest.raises(ValueError, match="d_head"):
        GroupedQueryAttention(15, 3, 1, rotary=True)  # d_head = 5
    with pytest.raises(TypeError, match="rotary"):
        GroupedQueryAttention(16, 4, 2, rotary=1)
    with pytest.raises(ValueError, match="positions"):
        rotate(torch.zeros(1, 3, 4), [0, 1])
    with pytest.raises(TypeError, match="positions"):
        rotate(torch.zeros(1, 3, 4), torch.zeros(3))
    with pytest.raises(TypeError, match=r"positions\[1\]"):
        rotate(torch.zeros(1, 2, 4), [0, 1.5])
    with pytest.raises(TypeError, match="position"):
        rotary_matrix(0.5, 4)
    with pytest.raises(ValueError, match="x"):
        rotate(torch.zeros(4), [0])
    with pytest.raises(ValueError, match=r"positions \(batch, seq\)"):
        rotate(torch.zeros(2, 1, 3, 4), torch.zeros(3, 3, dtype=torch.long))


def test_each_sequence_may_have_its_own_positions():
    x = _vectors(3, 2, 4, 6)  # (batch, heads, seq, d_head)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8], [0, 0, 0, 1]])
    both = rotate(x, positions, base=100.0)
    for b in range(3):
        assert torch.equal(both[b], rotate(x[b], positions[b], base=100.0))


def _rotary_gqa(**kw):
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 2, rotary=True, **kw).double().eval()
    with torch.no_grad():
        for b in (gqa.b_Q, gqa.b_K, gqa.b_V, gqa.b_O):
            b.normal_()
    return gqa


@pytest.mark.parametrize("blocks", [[1] * 7, [3, 1, 3], [5, 2]], ids=["1s", "mixed", "5+2"])
def test_rotary_gqa_with_a_cache_equals_the_full_pass(blocks):
    gqa = _rotary_gqa()
    x = _vectors(2, 7, 16, seed=3)
    full = gqa(x, causal=True)
    cache, out, start = KVCache(), [], 0
    for size in blocks:
        out.append(gqa(x[:, start : start + size], causal=True, cache=cache))
        start += size
    assert (torch.cat(out, dim=1) - full).abs().max() < 1e-10
    _, rec = run_with_cache(gqa, x, causal=True)
    # the cache stores rotated keys: those the hook point k records
    assert (cache.tensors["k"] - rec["k"]).abs().max() < 1e-12


def test_rotary_gqa_hooks_record_rotated_queries_and_keys_and_differs_from_plain():
    gqa = _rotary_gqa()
    x = _vectors(1, 5, 16, seed=4)
    _, rec = run_with_cache(gqa, x, causal=True)
    gqa.rotary = False
    plain, raw = run_with_cache(gqa, x, causal=True)
    positions = torch.arange(5)
    assert (rec["q"] - rotate(raw["q"], positions)).abs().max() < 1e-12
    assert (rec["k"] - rotate(raw["k"], positions)).abs().max() < 1e-12
    assert torch.equal(rec["q"][:, :, 0], raw["q"][:, :, 0])  # position 0: unrotated
    gqa.rotary = True
    assert (gqa(x, causal=True) - plain).abs().max() > 1e-3
    assert "rotary=True" in repr(gqa)
    full = regroup(gqa, gqa.n_heads)  # rotary stays a setting of the grouped layer
    assert full.rotary and not isinstance(full, MultiHeadAttention)
    assert (full(x, causal=True) - gqa(x, causal=True)).abs().max() < 1e-12


def test_rotary_attention_is_invariant_to_shifting_every_position():
    # three cached padding tokens move the block to positions 3..6; its pattern over its own
    # keys is the one at positions 0..3 (only offsets matter)
    gqa = _rotary_gqa()
    gqa.materialize = True
    x = _vectors(1, 4, 16, seed=5)
    _, fresh = run_with_cache(gqa, x, causal=True)
    cache = KVCache()
    past_k = _vectors(1, 2, 3, 4, seed=6)
    cache.append(torch.ones(1, 3, dtype=torch.bool), k=past_k, v=past_k)  # 3 padding tokens
    _, shifted = run_with_cache(gqa, x, causal=True, cache=cache)
    assert (shifted["pattern"][..., 3:] - fresh["pattern"]).abs().max() < 1e-10


def test_the_half_split_pairing_is_the_same_rotation_after_a_permutation():
    # Hugging Face's Llama code pairs coordinates (i, i + d/2) ("rotate_half"); ours pairs
    # (2i, 2i + 1). Coordinate 2i + j of ours is coordinate j * d/2 + i of theirs.
    d, t = 8, torch.tensor([0, 3, 11])
    x = _vectors(2, 3, d)  # (heads, seq, d_head)
    theirs_of_ours = torch.arange(d).reshape(2, d // 2).T.flatten()  # [0, 4, 1, 5, 2, 6, 3, 7]
    half = x[..., torch.argsort(theirs_of_ours)]  # x in their layout
    angles = t[:, None].double() * 10000.0 ** (-torch.arange(0, d, 2).double() / d)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    rotated_half = half * cos + torch.cat([-half[..., d // 2 :], half[..., : d // 2]], -1) * sin
    assert torch.allclose(rotated_half[..., theirs_of_ours], rotate(x, t), atol=1e-12)


def test_the_rope_base_is_a_setting_of_the_layer():
    x = _vectors(2, 5, 16).float()
    torch.manual_seed(0)
    slow = GroupedQueryAttention(16, 4, 2, rotary=True, rope_base=1e5).eval()
    torch.manual_seed(0)
    default = GroupedQueryAttention(16, 4, 2, rotary=True).eval()
    slow.materialize = default.materialize = True
    _, cache = run_with_cache(slow, x, causal=True)
    q = project(x, (slow.W_Q, slow.b_Q))[0]  # (batch, heads, seq, d_head)
    assert torch.allclose(cache["q"], rotate(q, torch.arange(5), base=1e5), atol=1e-6)
    assert (slow(x, causal=True) - default(x, causal=True)).abs().max() > 1e-4
    with pytest.raises(ValueError, match="rope_base"):
        GroupedQueryAttention(16, 4, 2, rotary=True, rope_base=0.5)


def test_positions_given_to_the_layer_replace_the_count_from_the_cache():
    gqa = _rotary_gqa()
    x = _vectors(2, 4, 16)
    shifted = gqa(x, causal=True, positions=torch.arange(7, 11))
    assert (shifted - gqa(x, causal=True)).abs().max() < 1e-12  # offsets alone matter
    cache = KVCache()
    gqa(x[:, :3], causal=True, cache=cache, positions=torch.tensor([[5, 6, 7], [0, 1, 2]]))
    last = gqa(x[:, 3:], causal=True, cache=cache, positions=torch.tensor([[8], [3]]))
    assert (last - shifted[:, 3:]).abs().max() < 1e-12
    skewed = gqa(x, causal=True, positions=torch.tensor([0, 1, 2, 9]))
    assert (skewed[:, 3] - shifted[:, 3]).abs().max() > 1e-3
