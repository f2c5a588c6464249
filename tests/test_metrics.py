import math

import pytest
import torch

from multihead.analysis.metrics import entropy, head_confidence, max_weight, offset_profile


def test_entropy_handles_zero_weights():
    one_hot = torch.eye(4)
    assert torch.equal(entropy(one_hot), torch.zeros(4))
    uniform = torch.full((2, 5), 0.2)
    assert torch.allclose(entropy(uniform), torch.full((2,), math.log(5)))
    half = torch.tensor([0.5, 0.5, 0.0])
    assert torch.allclose(entropy(half), torch.tensor(math.log(2)))


def test_confidence_and_max_weight():
    p = torch.zeros(2, 3, 4, 4)
    p[:, 0] = torch.eye(4)  # a perfectly confident head
    p[:, 1] = 0.25  # a uniform head
    p[:, 2, :, 0] = 1.0
    conf = head_confidence(p)
    assert torch.allclose(conf, torch.tensor([1.0, 0.25, 1.0]))
    assert max_weight(p).shape == (2, 3, 4)
    mask = torch.tensor([[True, False, False, False]] * 2)
    assert torch.allclose(head_confidence(p, mask), conf)


def test_offset_profile_of_a_previous_token_head():
    n = 5
    prev = torch.zeros(1, 1, n, n)
    prev[0, 0, 0, 0] = 1.0
    for i in range(1, n):
        prev[0, 0, i, i - 1] = 1.0
    prof = offset_profile(prev)[0]
    assert prof.shape == (2 * n - 1,)
    assert prof[n - 2] == 1.0  # offset -1: every query that has a previous token uses it
    assert prof.argmax() == n - 2


@pytest.mark.parametrize(
    "bad, err",
    [
        ([[0.5, 0.5]], TypeError),
        (torch.tensor([[1, 0]]), TypeError),
        (torch.tensor(0.5), ValueError),
        (torch.tensor([[-0.5, 1.5]]), ValueError),
    ],
)
def test_entropy_bad_input(bad, err):
    with pytest.raises(err, match="pattern"):
        entropy(bad)


def test_confidence_bad_input():
    p = torch.full((2, 3, 4, 4), 0.25)
    with pytest.raises(ValueError, match=r"\(batch, heads, query, key\)"):
        head_confidence(p[0])
    with pytest.raises(TypeError, match="query_mask"):
        head_confidence(p, torch.ones(2, 4))
    with pytest.raises(ValueError, match="query_mask has shape"):
        head_confidence(p, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="no query"):
        head_confidence(p, torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="n, n"):
        offset_profile(torch.full((1, 1, 3, 4), 0.25))


def test_within_group_rank_correlation_removes_the_group_levels():
    from multihead.analysis.metrics import rank_correlation, within_group_rank_correlation

    # Two groups: across groups x and y rise together, inside each group they fall.
    x = torch.tensor([0.0, 1.0, 2.0, 10.0, 11.0, 12.0])
    y = torch.tensor([2.0, 1.0, 0.0, 12.0, 11.0, 10.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    assert rank_correlation(x, y) > 0.5
    assert within_group_rank_correlation(x, y, groups).item() == pytest.approx(-1.0)
    assert within_group_rank_correlation(x, x, groups).item() == pytest.approx(1.0)
    # one group: the plain Spearman correlation
    z = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0, 0.0])
    one = torch.zeros(6, dtype=torch.long)
    assert within_group_rank_correlation(x, z, one).item() == pytest.approx(
        rank_correlation(x, z).item()
    )
    # singleton groups are skipped; no spread gives nan
    assert within_group_rank_correlation(x, y, torch.tensor([0, 0, 0, 1, 1, 2])).item() == (
        pytest.approx(-1.0)
    )
    assert math.isnan(within_group_rank_correlation(torch.ones(4), x[:4], one[:4]).item())


def test_within_group_rank_correlation_bad_input():
    from multihead.analysis.metrics import within_group_rank_correlation

    x = torch.arange(4.0)
    with pytest.raises(TypeError, match="groups"):
        within_group_rank_correlation(x, x, [0, 0, 1, 1])
    with pytest.raises(TypeError, match="integer labels"):
        within_group_rank_correlation(x, x, torch.zeros(4))
    with pytest.raises(ValueError, match="same number"):
        within_group_rank_correlation(x, x[:3], torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="at least 2"):
        within_group_rank_correlation(x, x, torch.arange(4))
