import pytest

from multihead.timing import median_times


def test_median_times_returns_one_positive_time_per_function():
    calls = []
    times = median_times({"a": lambda: calls.append("a"), "b": lambda: sum(range(1000))}, rounds=3)
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert len(calls) == 2 + 3 * 3  # warmup + rounds * number


def test_median_times_bad_input():
    with pytest.raises(ValueError, match="fns"):
        median_times({})
    with pytest.raises(TypeError, match="fns"):
        median_times({"a": 3})
    with pytest.raises(ValueError, match="rounds"):
        median_times({"a": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="warmup"):
        median_times({"a": lambda: None}, warmup=-1)
