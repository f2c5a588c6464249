import pytest
import torch

from multihead.core.attention import MultiHeadAttention
from multihead.core.config import ModelConfig
from multihead.core.hooks import run_with_cache
from multihead.core.model import EncoderModel
from multihead.core.talking_heads import TalkingHeadsAttention


def _pair(**kw):
    torch.manual_seed(0)
    th = TalkingHeadsAttention(32, 4, **kw)
    plain = MultiHeadAttention(32, 4)
    plain.load_state_dict({k: v for k, v in th.state_dict().items() if k in plain.state_dict()})
    return th, plain


def test_equals_plain_attention_at_init():
    th, plain = _pair()
    x = torch.randn(2, 7, 32)
    pad = torch.tensor([[False] * 5 + [True] * 2, [False] * 7])
    for kw in ({}, {"causal": True}, {"key_padding_mask": pad}):
        assert torch.allclose(th(x, **kw), plain(x, **kw), atol=1e-5), kw


def test_a_query_that_sees_no_key_reads_nothing_as_in_plain_attention():
    th, plain = _pair()
    with torch.no_grad():
        th.P_l.normal_()  # mixed logits: still no visible key for the empty rows
        th.b_O.normal_()
    plain.b_O = th.b_O
    x = torch.randn(2, 4, 32, requires_grad=True)
    pad = torch.tensor([[True, True, False, False], [False] * 4])  # left padding
    out, cache = run_with_cache(th, x, key_padding_mask=pad, causal=True)
    assert torch.isfinite(out).all()
    assert (cache["pattern"][0, :, :2] == 0).all()  # queries 0 and 1 see only padding
    assert torch.allclose(out[0, :2], th.b_O.expand(2, -1))  # every head writes 0 there
    torch.testing.assert_close(out[0, :2], plain(x, key_padding_mask=pad, causal=True)[0, :2])
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(th.P_l.grad).all()


def test_hooks_shapes_and_masks():
    th = TalkingHeadsAttention(24, 3, d_key=4, d_value=6, n_key_heads=5, n_value_heads=2)
    assert th.P_l.shape == (5, 3) and th.P_w.shape == (3, 2)
    x = torch.randn(2, 6, 24)
    pad = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])
    with torch.no_grad():
        th.P_l.normal_()
    out, cache = run_with_cache(th, x, key_padding_mask=pad, causal=True)
    assert out.shape == (2, 6, 24)
    assert cache["scores"].shape == (2, 5, 6, 6)
    assert cache["logits"].shape == cache["pattern"].shape == (2, 3, 6, 6)
    assert cache["mixed_pattern"].shape == (2, 2, 6, 6) and cache["z"].shape == (2, 2, 6, 6)
    p = cache["pattern"]
    assert torch.allclose(p.sum(-1), torch.ones(2, 3, 6), atol=1e-6)
    assert (p[0, :, :, 4:] == 0).all() and (p[:, :, torch.ones(6, 6).triu(1).bool()] == 0).all()


def test_mixing_raises_the_rank_of_the_logits():
    torch.manual_seed(1)
    n, d_key = 16, 2
    th = TalkingHeadsAttention(64, 4, d_key=d_key, d_value=16)
    with torch.no_grad():
        th.P_l.normal_()
    _, cache = run_with_cache(th, torch.randn(1, n, 64))
    unmixed = torch.linalg.matrix_rank(cache["scores"][0, 0])
    mixed = torch.linalg.matrix_rank(cache["logits"][0, 0])
    assert unmixed == d_key and mixed == 4 * d_key


def test_pre_and_post_mixing_switch_independently():
    th = TalkingHeadsAttention(16, 2, pre_mix=False)
    assert th.P_l is None and th.P_w is not None
    th = TalkingHeadsAttention(16, 2, post_mix=False)
    assert th.P_w is None
    x = torch.randn(1, 3, 16)
    assert th(x).shape == (1, 3, 16)


def test_model_option():
    cfg = ModelConfig(vocab_size=6, d_model=16, n_heads=4, n_layers=1, attention="talking_heads")
    model = EncoderModel(cfg)
    assert isinstance(model.encoder.layers[0].attn, TalkingHeadsAttention)
    assert model(torch.randint(6, (2, 5))).shape == (2, 5, 6)


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"n_key_heads": 3, "pre_mix": False}, ValueError, "pre_mix"),
        ({"n_value_heads": 3, "post_mix": False}, ValueError, "post_mix"),
        ({"n_key_heads": 0}, ValueError, "n_key_heads"),
        ({"n_value_heads": 1.5}, TypeError, "n_value_heads"),
        ({"pre_mix": "yes"}, TypeError, "pre_mix"),
    ],
)
def test_bad_input(kwargs, err, match):
    with pytest.raises(err, match=match):
        TalkingHeadsAttention(16, 2, **kwargs)


def test_bad_mixing_matrix_and_config():
    with pytest.raises(ValueError, match="mixing matrix"):
        TalkingHeadsAttention.mix(torch.randn(1, 3, 2, 2), torch.eye(2))
    with pytest.raises(ValueError, match="not divisible"):
        TalkingHeadsAttention(30, 4)
    with pytest.raises(ValueError, match="attn_dropout"):
        ModelConfig(vocab_size=3, attention="talking_heads", attn_dropout=0.1)
    with pytest.raises(ValueError, match="attention"):
        ModelConfig(vocab_size=3, attention="linear")
    with pytest.raises(ValueError, match="mask heads instead"):
        TalkingHeadsAttention(16, 2).prune_heads([0])
