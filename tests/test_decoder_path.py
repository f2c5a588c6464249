"""The decoder path wherever the course runs: a left-padded prompt decodes as the same prompt
alone, rotary angles never need float64 on the model's device, the lowest accepted torch
zeroes fully masked rows in its fused kernel, ``convert_decoder`` regroups directly, and a
cache refuses a batch of another size."""

import re
from pathlib import Path

import pytest
import torch
from support.fake_device import FAKE, FakeAccelerator

from multihead.core.decoder import Decoder
from multihead.core.rotary import rotate
from multihead.core.sharing import GroupedQueryAttention, KVCache

ROOT = Path(__file__).resolve().parents[1]
VOCAB, MAX_LEN = 13, 16
SCHEMES = ("learned", "sinusoidal", "rotary", "none")


def _decoder(positions, **kw):
    torch.manual_seed(0)
    return Decoder(VOCAB, MAX_LEN, 16, 2, 4, positions=positions, **kw).double().eval()


def test_rotary_angles_are_never_float64_on_the_device():
    # MPS has no float64: the angles are computed on the CPU, then cast and moved
    with FakeAccelerator() as fake:
        x = torch.randn(2, 3, 5, 8).to(FAKE)
        out = rotate(x, torch.arange(5).to(FAKE), base=100.0).cpu()
        layer = GroupedQueryAttention(16, 4, 2, rotary=True).to(FAKE)
        layer(torch.randn(2, 5, 16).to(FAKE), causal=True)
        x = x.cpu()
    assert not fake.float64, f"float64 tensors on the device: {fake.float64}"
    assert torch.equal(out, rotate(x, torch.arange(5), base=100.0))


def test_the_lowest_torch_accepted_zeroes_fully_masked_rows_in_its_fused_kernel():
    # SDPA returns zeros for a query that sees no key only since torch 2.5 (pytorch PR
    # 133882, "call _safe_softmax from SDPA"); before, NaN, which left padding under a causal
    # mask produces and the next layer spreads to every query. 2.5 also brings enable_gqa.
    floor = re.search(r'"torch>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(map(int, floor.split("."))) >= (2, 5), f"pyproject.toml accepts torch {floor}"
    q = torch.randn(1, 1, 2, 4)
    blocked_all = torch.tensor([[False, False], [True, True]])  # "may attend": row 0 sees none
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=blocked_all)
    assert (out[0, 0, 0] == 0).all()


def test_a_cache_refuses_a_batch_of_another_size():
    cache = KVCache()
    cache.append(k=torch.zeros(2, 1, 3, 4), v=torch.zeros(2, 1, 3, 4))
    with pytest.raises(ValueError, match=r"KVCache.*batch of 2.*batch of 3"):
        cache.append(k=torch.zeros(3, 1, 1, 4), v=torch.zeros(3, 1, 1, 4))
    model = _decoder("learned")
    cache = model.new_cache()
    model(torch.zeros(2, 3, dtype=torch.long), None, cache)
    with pytest.raises(ValueError, match=r"KVCache.*batch of 2.*batch of 1"):
        model(torch.zeros(1, 1, dtype=torch.long), None, cache)
