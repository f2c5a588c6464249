"""analysis.sinks: self and sink heads by attention mass, and mean |gradient| on a key group,
on hand-built patterns."""

import pytest
import torch

from multihead.analysis.sinks import key_gradient, key_mass, self_heads, self_share, sink_heads


def patterns():
    # One layer stack of 2 sentences (lengths 3 and 2, padded to 3), 2 heads:
    # head 0 attends to itself, head 1 to key 0 (the "sink").
    eye = torch.eye(3)
    first = torch.zeros(3, 3)
    first[:, 0] = 1
    p = torch.stack([torch.stack([eye, first]), torch.stack([eye, first])])  # (2, 2, 3, 3)
    p[1, :, 2] = 0  # padding query of sentence 1
    p[1, :, :, 2] = 0
    return p, torch.tensor([3, 2])


def test_self_and_sink_heads():
    p, lengths = patterns()
    share = self_share(p, lengths)
    # head 1: only query 0 attends to itself (key 0): 1 of 3 and 1 of 2 real queries.
    assert torch.allclose(share, torch.tensor([1.0, 2 / 5]))
    sink = torch.zeros(2, 3, dtype=torch.bool)
    sink[:, 0] = True
    assert torch.allclose(key_mass(p, sink, lengths), torch.tensor([2 / 5, 1.0]))
    out = self_heads(p[None], lengths)  # a stack with a layer dimension
    assert out["share"].shape == (1, 2) and out["is_role"].tolist() == [[True, False]]
    out = sink_heads(p, sink, lengths, threshold=0.9)
    assert out["is_role"].tolist() == [False, True]
    # A padding key in the group is ignored.
    pad = sink.clone()
    pad[1, 2] = True
    assert torch.allclose(key_mass(p, pad, lengths), key_mass(p, sink, lengths))


def test_key_gradient():
    g = torch.zeros(2, 2, 2, 3, 3)  # (layers, batch, heads, query, key)
    g[0, :, :, :, 0] = -2.0  # layer 0: gradient only on key 0 (sign ignored)
    g[1] = 1.0
    g[:, 1, :, 2] = 100.0  # padding query of sentence 1: must not count
    g[:, 1, :, :, 2] = 100.0  # padding key
    lengths = torch.tensor([3, 2])
    key0 = torch.zeros(2, 3, dtype=torch.bool)
    key0[:, 0] = True
    assert torch.allclose(key_gradient(g, key0, lengths), torch.tensor([2.0, 1.0]))
    assert torch.allclose(key_gradient(g, ~key0, lengths), torch.tensor([0.0, 1.0]))
    assert key_gradient(g[0], key0, lengths).shape == ()


def test_bad_input():
    p, lengths = patterns()
    keys = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="pattern must be shaped"):
        self_share(p[0], lengths)
    with pytest.raises(ValueError, match="negative"):
        self_share(-p, lengths)
    with pytest.raises(TypeError, match="lengths"):
        self_share(p, [3, 2])
    with pytest.raises(ValueError, match="lengths has 3"):
        self_share(p, torch.tensor([3, 2, 1]))
    with pytest.raises(ValueError, match="lengths must lie"):
        self_share(p, torch.tensor([4, 2]))
    with pytest.raises(TypeError, match="keys must be a bool"):
        key_mass(p, keys.float(), lengths)
    with pytest.raises(ValueError, match="keys has shape"):
        key_mass(p, keys[:, :2], lengths)
    with pytest.raises(ValueError, match="threshold"):
        self_heads(p, lengths, threshold=1.5)
    with pytest.raises(ValueError, match="no real key"):
        key_gradient(torch.zeros(2, 2, 3, 3), torch.zeros(2, 3, dtype=torch.bool), lengths)
    with pytest.raises(ValueError, match="as many queries"):
        key_mass(p[..., :2], keys[:, :2], torch.tensor([2, 2]))
