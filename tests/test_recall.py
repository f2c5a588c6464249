"""Multi-query associative recall (chapter 10's task) and the function that trains its
decoders side by side."""

import pytest
import torch
from support.models import same_weights

from multihead.core.config import TrainConfig
from multihead.core.decoder import Decoder
from multihead.core.runtime import side_by_side
from multihead.core.train import IGNORE, train_seeds
from multihead.tasks.recall import RecallTask, train_recall_decoder

TASK = RecallTask(n_keys=8, n_values=8, n_pairs=3)
WIDTH = {"d_model": 16, "n_heads": 4, "d_head": 4}
CONFIG = TrainConfig(steps=6, batch_size=4, lr=3e-3, warmup=2)


def test_sample_asks_every_key_for_its_value():
    x, y = TASK.sample(5, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, TASK.seq_len)
    n = TASK.n_pairs
    for row, target in zip(x.tolist(), y.tolist(), strict=True):
        pairs = dict(zip(row[0 : 2 * n : 2], row[1 : 2 * n : 2], strict=True))
        assert len(pairs) == n  # keys drawn without replacement
        for i in range(2 * n, 4 * n, 2):
            assert target[i] == pairs[row[i]] == row[i + 1]
            assert target[i + 1] == IGNORE
        assert all(t == IGNORE for t in target[: 2 * n])


def test_the_task_checks_its_sizes():
    with pytest.raises(ValueError, match="n_pairs"):
        RecallTask(n_keys=3, n_pairs=4)
    with pytest.raises(TypeError, match="generator"):
        TASK.sample(2, 0)


@pytest.mark.parametrize("layout", [{"n_kv_heads": 2}, {"d_latent": 8}])
def test_train_recall_decoder_is_train_seeds_bit_for_bit(layout):
    def make(_):
        return Decoder(TASK.vocab_size, TASK.seq_len, 16, 2, 4, d_head=4, d_ff=32, **layout)

    (expected,), (history,) = train_seeds([3], make, TASK.sample, CONFIG)
    model, got_history, snapshot = train_recall_decoder(TASK, 3, CONFIG, width=WIDTH, layout=layout)
    assert snapshot is None and same_weights(model, expected) and got_history.loss == history.loss


def test_the_snapshot_is_the_shorter_run():
    longer = TrainConfig(steps=9, batch_size=4, lr=3e-3, warmup=2)
    short, _, _ = train_recall_decoder(TASK, 1, CONFIG, width=WIDTH, layout={"n_kv_heads": 1})
    _, history, snapshot = train_recall_decoder(
        TASK, 1, longer, width=WIDTH, layout={"n_kv_heads": 1}, snapshot_at=CONFIG.steps
    )
    assert same_weights(snapshot, short) and len(history.loss) == longer.steps
    _, _, last = train_recall_decoder(
        TASK, 1, CONFIG, width=WIDTH, layout={"n_kv_heads": 1}, snapshot_at=CONFIG.steps
    )
    assert same_weights(last, short)


@pytest.mark.slow
def test_side_by_side_trains_the_same_models():
    jobs = [
        {"task": TASK, "seed": s, "config": CONFIG, "width": WIDTH, "layout": {"n_kv_heads": k}}
        for s, k in ((0, 4), (1, 2), (2, 1))
    ]
    apart = side_by_side(train_recall_decoder, jobs, workers=2)
    here = [train_recall_decoder(**job) for job in jobs]
    for (model, history, _), (again, again_history, _) in zip(apart, here, strict=True):
        assert same_weights(model, again) and history.loss == again_history.loss


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"task": "recall"}, TypeError, "task"),
        ({"config": {"steps": 3}}, TypeError, "config"),
        ({"width": {"d_model": 16}}, ValueError, "width"),
        ({"snapshot_at": 7}, ValueError, "snapshot_at"),
    ],
)
def test_train_recall_decoder_bad_input(kwargs, err, match):
    args = {"task": TASK, "seed": 0, "config": CONFIG, "width": WIDTH, "layout": {}}
    with pytest.raises(err, match=match):
        train_recall_decoder(**{**args, **kwargs})
