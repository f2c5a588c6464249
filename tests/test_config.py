import dataclasses

import pytest

from multihead.core.config import ModelConfig, TrainConfig


def test_defaults_and_variants():
    cfg = ModelConfig(vocab_size=10)
    assert cfg.head_sizes() == (cfg.d_model // cfg.n_heads,) * 2
    wide = dataclasses.replace(cfg, n_heads=8, d_key=32)
    assert wide.head_sizes() == (32, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"d_model": 100, "n_heads": 8}, "d_model=100 is not divisible by n_heads=8"),
        ({"d_model": 0}, "d_model"),
        ({"n_heads": -2}, "n_heads"),
        ({"d_key": 0}, "d_key"),
        ({"dropout": 1.0}, "dropout"),
        ({"norm": "sandwich"}, "norm"),
        ({"init": "magic"}, "init"),
        ({"init_gain": 0}, "init_gain"),
        ({"init_epsilon": -1.0}, "init_epsilon"),
    ],
)
def test_model_config_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ModelConfig(vocab_size=10, **kwargs)


def test_model_config_types():
    with pytest.raises(TypeError, match="vocab_size"):
        ModelConfig(vocab_size=10.0)


def test_non_divisible_width_with_explicit_sizes_is_fine():
    cfg = ModelConfig(vocab_size=5, d_model=100, n_heads=8, d_key=16, d_value=12)
    assert cfg.head_sizes()[0] == 16


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": -1}, "batch_size"),
        ({"lr": 0}, "lr"),
        ({"weight_decay": -1}, "weight_decay"),
        ({"warmup": -5}, "warmup"),
        ({"grad_clip": -1}, "grad_clip"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_train_config_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        TrainConfig(**kwargs)


@pytest.mark.parametrize("name", ["init_gain", "init_epsilon"])
def test_model_config_rejects_a_bool_as_a_number(name):
    with pytest.raises(TypeError, match=name):
        ModelConfig(vocab_size=10, **{name: True})


@pytest.mark.parametrize(
    "name", ["lr", "weight_decay", "grad_clip", "warmup", "seed", "eval_every"]
)
def test_train_config_rejects_a_bool_as_a_number(name):
    with pytest.raises(TypeError, match=name):
        TrainConfig(**{name: True})
