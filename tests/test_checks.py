"""The shared argument checks: each error names the argument."""

import pytest
import torch

from multihead._checks import check_bool, check_int_tensor, check_seeds


def test_check_seeds_returns_a_tuple_of_distinct_non_negative_ints():
    assert check_seeds("seeds", [3, 0, 7]) == (3, 0, 7)
    assert check_seeds("seeds", range(2)) == (0, 1)
    assert check_seeds("seeds", (5,)) == (5,)
    assert check_seeds("seeds", [1, 2], at_least=2) == (1, 2)
    assert check_seeds("seeds", [1, 2], count=2) == (1, 2)


@pytest.mark.parametrize(
    "seeds, err, match",
    [
        ("012", TypeError, "seeds must be a sequence of ints"),
        (b"\x00", TypeError, "seeds must be a sequence of ints"),
        ({1, 2}, TypeError, "seeds must be a sequence of ints"),
        (3, TypeError, "seeds must be a sequence of ints"),
        ([], ValueError, "seeds is empty"),
        ([1, True], TypeError, r"seeds\[1\] must be an int"),
        ([1.0], TypeError, r"seeds\[0\] must be an int"),
        ([-1], ValueError, r"seeds\[0\]=-1"),
        ([4, 2, 4], ValueError, "repeats a seed"),
    ],
)
def test_check_seeds_rejects(seeds, err, match):
    with pytest.raises(err, match=match):
        check_seeds("seeds", seeds)


def test_check_seeds_counts():
    with pytest.raises(ValueError, match="replicates needs at least 2 seeds"):
        check_seeds("replicates", [0], at_least=2)
    with pytest.raises(ValueError, match="seeds has 2 entries, expected 3"):
        check_seeds("seeds", [0, 1], count=3)


def test_check_bool():
    assert check_bool("flag", True) is True
    for bad in (1, 0, "yes", None, torch.tensor(True)):
        with pytest.raises(TypeError, match="flag must be a bool"):
            check_bool("flag", bad)


def test_check_int_tensor():
    x = torch.tensor([[0, 2], [1, 1]])
    assert check_int_tensor("labels", x, ndim=2, lo=0, hi=3) is x
    with pytest.raises(TypeError, match="labels must be a torch.Tensor"):
        check_int_tensor("labels", [0, 1])
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        check_int_tensor("labels", torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        check_int_tensor("labels", torch.tensor([True]))
    with pytest.raises(ValueError, match=r"labels must be shaped \(batch,\)"):
        check_int_tensor("labels", x, ndim=1, layout="(batch,)")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        check_int_tensor("labels", x, lo=0, hi=2)
    with pytest.raises(ValueError, match="labels is empty"):
        check_int_tensor("labels", torch.zeros(0, dtype=torch.long), nonempty=True)
