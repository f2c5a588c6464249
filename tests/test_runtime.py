import pytest
import torch

from multihead.core import runtime


def test_pick_follows_the_environment(monkeypatch):
    monkeypatch.setenv("MULTIHEAD_FAST", "1")
    assert runtime.is_fast() and runtime.pick(full=10, fast=1) == 1 and runtime.mode() == "fast"
    monkeypatch.setenv("MULTIHEAD_FAST", "0")
    assert not runtime.is_fast() and runtime.pick(full=10, fast=1) == 10
    monkeypatch.delenv("MULTIHEAD_FAST")
    assert runtime.mode() == "full"


def test_bad_mode_value_is_named(monkeypatch):
    monkeypatch.setenv("MULTIHEAD_FAST", "maybe")
    with pytest.raises(ValueError, match="MULTIHEAD_FAST"):
        runtime.is_fast()


def test_device_choice(monkeypatch):
    monkeypatch.delenv("MULTIHEAD_DEVICE", raising=False)
    assert runtime.device("cpu").type == "cpu"
    assert runtime.device().type in {"cpu", "cuda", "mps"}
    with pytest.raises(ValueError, match="prefer"):
        runtime.device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            runtime.device("cuda")


def test_seed_everything_is_deterministic():
    g1 = runtime.seed_everything(7)
    a = torch.randn(3), torch.randint(10, (3,), generator=g1)
    g2 = runtime.seed_everything(7)
    b = torch.randn(3), torch.randint(10, (3,), generator=g2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("seed, err", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_seed_bad_input(seed, err):
    with pytest.raises(err, match="seed"):
        runtime.seed_everything(seed)


def test_seeds_follow_the_mode_and_the_offset(monkeypatch):
    monkeypatch.setenv("MULTIHEAD_FAST", "1")
    monkeypatch.delenv("MULTIHEAD_SEED_OFFSET", raising=False)
    assert runtime.seeds() == [0, 1, 2]
    monkeypatch.setenv("MULTIHEAD_FAST", "0")
    assert runtime.seeds(full=6) == [0, 1, 2, 3, 4, 5]
    monkeypatch.setenv("MULTIHEAD_SEED_OFFSET", "100")
    assert runtime.seeds(full=2) == [100, 101]
    for bad in ("-1", "x"):
        monkeypatch.setenv("MULTIHEAD_SEED_OFFSET", bad)
        with pytest.raises(ValueError, match="MULTIHEAD_SEED_OFFSET"):
            runtime.seeds()
    monkeypatch.delenv("MULTIHEAD_SEED_OFFSET")
    with pytest.raises(ValueError, match="fast"):
        runtime.seeds(fast=0)


def test_thread_count_depends_on_the_settings_and_the_cores_alone(monkeypatch):
    for var in ("MULTIHEAD_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(runtime, "_DEFAULT_THREADS", 6)  # a six-core machine
    # neither the load nor a clock is read: a machine that reports any load gives one answer
    for load in (0.0, 50.0):
        monkeypatch.setattr(runtime.os, "getloadavg", lambda load=load: (load,) * 3, raising=False)
        assert runtime.thread_count() == runtime.thread_count("small") == 1
        assert runtime.thread_count("large") == 6
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # torch read it: every kind keeps torch's count
    assert runtime.thread_count("small") == runtime.thread_count("large") == 6
    monkeypatch.setenv("MULTIHEAD_THREADS", "2")
    assert runtime.thread_count("small") == runtime.thread_count("large") == 2
    monkeypatch.setenv("MULTIHEAD_THREADS", "all")
    assert runtime.thread_count() == 6
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MULTIHEAD_THREADS", bad)
        with pytest.raises(ValueError, match="MULTIHEAD_THREADS"):
            runtime.thread_count()
    with pytest.raises(ValueError, match="kind"):
        runtime.thread_count("huge")


def test_threads_sets_the_count_for_a_block_and_restores_it(monkeypatch):
    for var in ("MULTIHEAD_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(runtime, "_DEFAULT_THREADS", 3)
    before = torch.get_num_threads()
    try:
        with runtime.threads("large") as count:
            assert count == torch.get_num_threads() == 3
            with runtime.threads("small"):
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == before
        with pytest.raises(RuntimeError), runtime.threads("large"):
            raise RuntimeError("the block failed")
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
