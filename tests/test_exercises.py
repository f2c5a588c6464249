"""Each checker accepts the course's reference answer and rejects a wrong one."""

import math

import pytest
import torch
from exercise_answers import MyMultiHeadAttention, flops
from exercise_answers import my_attention as reference_attention

from multihead import exercises as ex


def textbook_attention(q, k, v, mask=None):
    """Right everywhere except on a query that may look at no key (it gives nan there)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


def test_check_attention_names_the_mask_mistakes():
    """A padding mask moved onto the queries, and a mask of the opposite polarity."""

    def pads_queries(q, k, v, mask=None):  # the key-padding row used as a column of queries
        if mask is not None and mask.shape[-2] == 1:
            mask = mask.transpose(-2, -1)
        return textbook_attention(q, k, v, mask)

    def pads_queries_where_it_fits(q, k, v, mask=None):  # no error, but nan on whole rows
        if mask is not None and mask.shape[-2] == 1 and q.shape[-2] == k.shape[-2]:
            mask = mask.transpose(-2, -1)
        return textbook_attention(q, k, v, mask)

    for wrong in (pads_queries, pads_queries_where_it_fits):
        with pytest.raises(AssertionError, match=r"\(batch, 1, 1, key\)") as info:
            ex.check_attention(wrong)
        assert "every key is masked must read nothing" not in str(info.value)

    def inverted(q, k, v, mask=None):  # True read as "may attend"
        return textbook_attention(q, k, v, None if mask is None else ~mask)

    def sdpa(q, k, v, mask=None):  # the fused kernel's opposite polarity
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    for wrong in (inverted, sdpa):
        with pytest.raises(AssertionError, match="polarity is inverted"):
            ex.check_attention(wrong)


def test_check_attention():
    assert ex.check_attention(reference_attention).startswith("Correct")

    def unscaled(q, k, v, mask=None):
        return reference_attention(q * math.sqrt(q.shape[-1]), k, v, mask)

    def ignores_mask(q, k, v, mask=None):
        return reference_attention(q, k, v)

    def soft_mask(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask, -5.0)
        return scores.softmax(-1) @ v

    def uniform_when_empty(q, k, v, mask=None):  # -1e9: an empty row becomes uniform
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask, -1e9)
        return scores.softmax(-1) @ v

    for wrong in (unscaled, ignores_mask, soft_mask):
        with pytest.raises(AssertionError):
            ex.check_attention(wrong)
    for empty_rows_wrong in (textbook_attention, uniform_when_empty):
        with pytest.raises(AssertionError, match="look at no key|every key is masked"):
            ex.check_attention(empty_rows_wrong)
    with pytest.raises(AssertionError, match="shape"):
        ex.check_attention(lambda q, k, v, mask=None: reference_attention(q, k, v, mask)[..., :1])
    with pytest.raises(TypeError, match="fn"):
        ex.check_attention(3)


def test_check_attention_names_each_classic_bug():
    """Each wrong attention gets its own sentence: the softmax axis, the scale, Q and K."""

    def scores(q, k):
        return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])

    def over_queries(q, k, v, mask=None):  # softmax(dim=-2)
        return scores(q, k).softmax(-2) @ v

    def swapped_then_transposed(q, k, v, mask=None):  # k q^T, softmax, transposed back
        return scores(k, q).softmax(-1).transpose(-2, -1) @ v

    def unscaled(q, k, v, mask=None):
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v

    def by_d_k(q, k, v, mask=None):
        return (q @ k.transpose(-2, -1) / q.shape[-1]).softmax(-1) @ v

    def swapped(q, k, v, mask=None):  # k q^T used as it is
        return scores(k, q).softmax(-1) @ v

    def q_times_k(q, k, v, mask=None):  # no transpose: fails on shapes
        return (q @ k).softmax(-1) @ v

    for wrong, hint in (
        (over_queries, r"softmax runs over the queries \(dim=-2\)"),
        (swapped_then_transposed, r"k q\^T transposed back"),
        (unscaled, "the scores are not scaled"),
        (by_d_k, "not by d_k"),
        (swapped, "the queries and the keys are swapped"),
        (q_times_k, r"raised RuntimeError.*q @ k.transpose\(-2, -1\)"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_attention(wrong)

    def swapped_square_only(q, k, v, mask=None):  # right where n_q == n_k, swapped elsewhere
        if q.shape[-2] == k.shape[-2]:
            return reference_attention(q, k, v, mask)
        return scores(k, q).softmax(-1) @ v

    with pytest.raises(AssertionError, match="queries and keys swapped"):
        ex.check_attention(swapped_square_only)


def test_check_parameter_count():
    def right(d, h, dk, dv):
        return h * d * (2 * dk + dv) + h * dv * d + h * (2 * dk + dv) + d

    def no_biases(d, h, dk, dv):
        return h * d * (2 * dk + dv) + h * dv * d

    def no_b_O(d, h, dk, dv):
        return right(d, h, dk, dv) - d

    def no_W_O(d, h, dk, dv):
        return right(d, h, dk, dv) - h * dv * d

    def b_O_twice(d, h, dk, dv):
        return right(d, h, dk, dv) + d

    assert ex.check_mha_parameter_count(right).startswith("Correct")
    for wrong, hint in (
        (no_biases, "left out b_Q and b_K and b_V and b_O"),
        (no_b_O, r"left out b_O \(96 parameters\)"),
        (no_W_O, "left out W_V or W_O"),  # both have h d_model d_value numbers
        (b_O_twice, "counted twice b_O"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_mha_parameter_count(wrong)


def test_check_flops():
    def right(d, h, dk, dv, n):
        return 2 * (n * d * h * (2 * dk + dv) + h * n * n * (dk + dv) + n * h * dv * d)

    def forgot_values(d, h, dk, dv, n):
        return 2 * (n * d * h * (2 * dk + dv) + h * n * n * dk + n * h * dv * d)

    def one_per_multiply_add(d, h, dk, dv, n):
        return right(d, h, dk, dv, n) // 2

    def no_scores(d, h, dk, dv, n):
        return right(d, h, dk, dv, n) - 2 * h * n * n * dk

    assert ex.check_mha_flops(right).startswith("Correct")
    for wrong, hint in (
        (forgot_values, r"left out the weighted sum of values \(pattern @ V\)"),
        (one_per_multiply_add, "one FLOP per multiply-add"),
        (no_scores, r"left out Q K\^T"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_mha_flops(wrong)


def test_reference_flops_match_torch_counter():
    from torch.utils.flop_counter import FlopCounterMode

    from multihead.analysis.cost import attention_cost
    from multihead.core.attention import MultiHeadAttention
    from multihead.core.hooks import run_with_cache

    layer = MultiHeadAttention(48, 3, 8, 12)
    with FlopCounterMode(display=False) as counter:
        run_with_cache(layer, torch.randn(1, 9, 48))
    assert counter.get_total_flops() == flops(48, 3, 8, 12, 9)
    assert counter.get_total_flops() == attention_cost(48, 3, 8, 12, 9)["flops"]


def test_check_mha_module():
    assert ex.check_mha_module(MyMultiHeadAttention).startswith("Correct")

    class IgnoresPadding(MyMultiHeadAttention):
        def forward(self, x, key_padding_mask=None, causal=False):
            return super().forward(x, causal=causal)

    class PadsQueries(MyMultiHeadAttention):  # the padding mask broadcast over queries
        def forward(self, x, key_padding_mask=None, causal=False):
            out = super().forward(x, causal=causal)
            if key_padding_mask is None:
                return out
            return out.masked_fill(key_padding_mask[..., None], 0.0)

    class NoScale(MyMultiHeadAttention):
        def forward(self, x, key_padding_mask=None, causal=False):
            self.d_head = 1.0
            return super().forward(x, key_padding_mask, causal)

    for wrong, hint in ((IgnoresPadding, "padding"), (PadsQueries, "padding"), (NoScale, "sqrt")):
        with pytest.raises(AssertionError, match=hint):
            ex.check_mha_module(wrong)

    class BroadcastsOverQueries(MyMultiHeadAttention):  # (batch, 1, key, 1): nan, no empty row
        def forward(self, x, key_padding_mask=None, causal=False):
            if key_padding_mask is None:
                return super().forward(x, causal=causal)
            q = torch.einsum("bsd,hde->bhse", x, self.W_Q) + self.b_Q[:, None, :]
            k = torch.einsum("bsd,hde->bhse", x, self.W_K) + self.b_K[:, None, :]
            v = torch.einsum("bsd,hde->bhse", x, self.W_V) + self.b_V[:, None, :]
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            scores = scores.masked_fill(key_padding_mask[:, None, :, None], float("-inf"))
            z = scores.softmax(dim=-1) @ v
            return torch.einsum("bhse,hed->bsd", z, self.W_O) + self.b_O

    with pytest.raises(AssertionError, match=r"\(batch, 1, 1, key\)") as info:
        ex.check_mha_module(BroadcastsOverQueries)
    assert "every key is masked must read nothing" not in str(info.value)

    class InvertsPadding(MyMultiHeadAttention):  # True read as "a real token"
        def forward(self, x, key_padding_mask=None, causal=False):
            pad = None if key_padding_mask is None else ~key_padding_mask
            return super().forward(x, pad, causal)

    class InvertsCausal(MyMultiHeadAttention):  # tril(): the keys a query may see, as blocked
        def forward(self, x, key_padding_mask=None, causal=False):
            out = super().forward(x, key_padding_mask)
            if not causal:
                return out
            n = x.shape[1]
            mask = torch.ones(n, n, dtype=torch.bool).tril()
            if key_padding_mask is not None:
                mask = mask | key_padding_mask[:, None, None, :]
            q, k, v = (
                torch.einsum("bsd,hde->bhse", x, W) + b[:, None, :]
                for W, b in ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V))
            )
            scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_head)).masked_fill(mask, -1e30)
            empty = mask.all(dim=-1, keepdim=True)
            z = scores.softmax(dim=-1).masked_fill(empty, 0.0) @ v
            return torch.einsum("bhse,hed->bsd", z, self.W_O) + self.b_O

    for wrong in (InvertsPadding, InvertsCausal):
        with pytest.raises(AssertionError, match="polarity is inverted"):
            ex.check_mha_module(wrong)

    class Unwritten(torch.nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            raise NotImplementedError("write __init__")

    with pytest.raises(AssertionError, match="fill in the function body first"):
        ex.check_mha_module(Unwritten)

    class WrongLayout(MyMultiHeadAttention):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.W_O = torch.nn.Parameter(torch.zeros(d_model, d_model))

    with pytest.raises(AssertionError, match="W_O has shape"):
        ex.check_mha_module(WrongLayout)


def test_every_checker_is_exported_and_none_uses_a_bare_assert():
    import ast
    import importlib
    from pathlib import Path

    folder = Path(ex.__file__).parent
    for path in sorted([*folder.glob("ch*.py"), folder / "primer.py"]):
        module = importlib.import_module(f"multihead.exercises.{path.stem}")
        checkers = {n for n in vars(module) if n.startswith("check_")}
        assert checkers, path.name
        assert checkers <= set(ex.__all__), f"{path.name}: {sorted(checkers - set(ex.__all__))}"
        tree = ast.parse(path.read_text())
        asserts = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
        assert not asserts, f"{path.name}:{asserts} use assert, which python -O removes"
