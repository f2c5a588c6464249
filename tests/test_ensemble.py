"""K seeds trained as one batched computation (``core.ensemble``, ``core.ensemble_train``):
each seed of the ensemble must end where the same seed ends when trained alone, for every
model family the chapters train, and come back as an ordinary model."""

from dataclasses import replace

import pytest
import torch

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.ensemble import SeedEnsemble, stack_seeds
from multihead.core.ensemble_train import (
    clip_per_seed,
    seed_cross_entropy,
    seed_token_loss,
    stack_batches,
    train_seeds,
)
from multihead.core.hooks import run_with_cache, run_with_hooks
from multihead.core.model import EncoderDecoder, EncoderModel, attention_modules
from multihead.core.train import IGNORE, token_accuracy, token_loss, train
from multihead.interventions.symmetry import tie_heads
from multihead.tasks.corpus import make_corpus
from multihead.tasks.synthetic import LookupTask, SubsetCountTask
from multihead.tasks.tagging import (
    TAGGING_PAD,
    build_tagger,
    tagger_config,
    tagging_data,
    tagging_loss,
    tagging_sampler,
    tagging_seed_loss,
)
from multihead.tasks.translation import (
    ROWS_PER_GROUP,
    SEQ2SEQ_PAD,
    encode,
    length_groups,
    sampler,
    seq2seq_loss,
    seq2seq_seed_loss,
)

CPU = torch.device("cpu")
SEEDS = [0, 1, 2]
TRAIN = TrainConfig(steps=12, batch_size=8, lr=3e-3, warmup=4, weight_decay=0.01)
LOOKUP = LookupTask(vocab_size=4, seq_len=8)


def _encoder_cfg(**changes) -> ModelConfig:
    base = dict(vocab_size=4, n_classes=16, d_model=16, n_heads=2, n_layers=2, max_len=8)
    return ModelConfig(**{**base, **changes})


def _max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    # b_K has a zero gradient in exact arithmetic (softmax ignores a constant per query), so
    # AdamW turns its roundoff into steps of size lr; it changes no output, so it is skipped.
    other = b.state_dict()
    diffs = [(t - other[n]).abs().max().item() for n, t in a.state_dict().items() if "b_K" not in n]
    return max(diffs)


@pytest.fixture
def float64():
    """Adam divides each gradient by its own running size, so an entry whose gradient is at
    roundoff level (in float32, e.g. a weight of an almost dead unit) moves by a random step
    of size lr; in float64 that roundoff is 1e-16, and the parameters can be compared."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(saved)


def _check_family(make, sample, loss_fn, seed_loss, pad=None, cfg=TRAIN) -> SeedEnsemble:
    """Train SEEDS batched and each seed alone; they must agree to 1e-5."""
    ensemble = stack_seeds(make, SEEDS)
    histories = train_seeds(ensemble, sample, cfg, loss_fn=seed_loss, pad=pad, device=CPU)
    for k, seed in enumerate(SEEDS):
        torch.manual_seed(seed)
        model = make(seed)
        alone = train(model, sample, replace(cfg, seed=seed), loss_fn=loss_fn, device=CPU,
                      progress=False)  # fmt: skip
        assert max(abs(a - b) for a, b in zip(alone.loss, histories[k].loss, strict=True)) < 1e-5
        if torch.get_default_dtype() == torch.float64:
            assert _max_diff(model, ensemble.pick(k)) < 1e-5, (
                seed,
                _max_diff(model, ensemble.pick(k)),
            )
    return ensemble


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"attention": "talking_heads"},
        {"norm": "post", "init": "ds_init"},
        {"init": "scaled", "init_gain": 0.25, "d_key": 4, "d_value": 6},
        {"attn_dropout": 0.1, "dropout": 0.1},  # on the CPU, the alone run's masks
    ],
    ids=["plain", "talking_heads", "post_norm_ds_init", "scaled_sizes", "dropout"],
)
def test_each_seed_equals_the_encoder_trained_alone(changes, float64):
    cfg = _encoder_cfg(**changes)
    _check_family(lambda s: EncoderModel(cfg), LOOKUP.sample, token_loss, seed_token_loss)


def test_float32_losses_and_evaluations_equal_the_alone_run():
    cfg = _encoder_cfg(dropout=0.1)
    _check_family(lambda s: EncoderModel(cfg), LOOKUP.sample, token_loss, seed_token_loss)
    x, y = LOOKUP.sample(64, torch.Generator().manual_seed(5))
    tcfg = replace(TRAIN, eval_every=6)

    def evaluate(model):
        return {"acc": token_accuracy(model(x), y), "train": model.training}

    ensemble = stack_seeds(lambda s: EncoderModel(cfg), SEEDS)
    histories = train_seeds(ensemble, LOOKUP.sample, tcfg, evaluate=evaluate, device=CPU)
    torch.manual_seed(SEEDS[2])
    alone = train(EncoderModel(cfg), LOOKUP.sample, replace(tcfg, seed=SEEDS[2]),
                  evaluate=evaluate, device=CPU, progress=False)  # fmt: skip
    assert [e["step"] for e in histories[2].evals] == [6, 12]
    for mine, theirs in zip(histories[2].evals, alone.evals, strict=True):
        assert abs(mine["acc"] - theirs["acc"]) < 1e-6 and mine["train"] is False
    assert histories[0].seconds == histories[2].seconds > 0  # the time of the batched run


def test_subset_count_task_equals_its_alone_runs():  # float32: the task builds float32 data
    task = SubsetCountTask(seq_len=8, subset_size=2)
    cfg = _encoder_cfg(vocab_size=2, n_classes=task.n_classes, n_layers=1, d_key=8)
    _check_family(lambda s: EncoderModel(cfg), task.sample, token_loss, seed_token_loss)


def test_tied_heads_equal_their_alone_runs(float64):
    def tied(seed):  # chapter 2: heads copied, with a seeded perturbation
        model = EncoderModel(_encoder_cfg(n_layers=1))
        attn = attention_modules(model)[0][1]
        tie_heads(attn, epsilon=0.01, generator=torch.Generator().manual_seed(seed + 100))
        return model

    _check_family(tied, LOOKUP.sample, token_loss, seed_token_loss)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(200, seed=0)


def test_tagger_seeds_equal_their_alone_runs(corpus, float64):
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    data = tagging_data(corpus, corpus.train)
    sample = tagging_sampler(data)
    batches = [sample(8, torch.Generator().manual_seed(s)) for s in SEEDS]
    assert len({b[0].shape[1] for b in batches}) > 1, "the seeds' batches must need padding"
    _check_family(
        lambda s: build_tagger(cfg, s), sample, tagging_loss, tagging_seed_loss, TAGGING_PAD
    )


def test_translation_seeds_equal_their_alone_runs(corpus, float64):
    src_vocab, tgt_vocab = len(corpus.src_vocab), len(corpus.tgt_vocab)
    cfg = ModelConfig(vocab_size=src_vocab, n_classes=tgt_vocab, d_model=16, n_heads=2,
                      n_layers=1, n_decoder_layers=2, d_ff=32, max_len=32)  # fmt: skip
    sample = sampler(encode(corpus, corpus.train))
    _check_family(
        lambda s: EncoderDecoder(cfg), sample, seq2seq_loss, seq2seq_seed_loss, SEQ2SEQ_PAD
    )


def test_translation_batches_in_length_groups_train_as_the_alone_runs(corpus, float64):
    # 48 rows: seq2seq_seed_loss runs the batch in two length groups (ROWS_PER_GROUP = 21),
    # and must still equal the alone runs, which see each batch whole.
    sizes = {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_decoder_layers": 1, "d_ff": 32}
    cfg = ModelConfig(len(corpus.src_vocab), n_classes=len(corpus.tgt_vocab), max_len=32, **sizes)
    data = encode(corpus, corpus.train)
    src, tgt = sampler(data)(48, torch.Generator().manual_seed(0))
    groups = length_groups(src[None], tgt[None], 48 // ROWS_PER_GROUP)
    assert len(groups) == 2 and sum(s.shape[1] for s, _ in groups) == 48
    assert sum(s.numel() for s, _ in groups) < src.numel(), "the groups must trim padding"
    family = (lambda s: EncoderDecoder(cfg), sampler(data), seq2seq_loss, seq2seq_seed_loss)
    ensemble = _check_family(*family, SEQ2SEQ_PAD, cfg=replace(TRAIN, batch_size=48))
    assert not ensemble.training and not ensemble.draws_at_random
    ensemble.train()
    assert not ensemble.draws_at_random  # no dropout, no gates: the groups are used
    ensemble.set_head_gates(lambda path, b, h, gens: None)
    assert ensemble.draws_at_random  # gates would be drawn once per group: one pass instead
    ensemble.set_head_gates(lambda path, b, h, gens: None, fixed_per_step=True)
    assert not ensemble.draws_at_random  # gates drawn once per step may be split
    with pytest.raises(TypeError, match="fixed_per_step"):
        ensemble.set_head_gates(None, fixed_per_step="yes")


def test_a_model_with_dropout_is_not_split_into_length_groups(corpus):
    cfg = ModelConfig(vocab_size=len(corpus.src_vocab), n_classes=len(corpus.tgt_vocab),
                      d_model=16, n_heads=2, n_layers=1, n_decoder_layers=1, d_ff=32, max_len=32,
                      attn_dropout=0.1)  # fmt: skip
    ensemble = stack_seeds(lambda s: EncoderDecoder(cfg), SEEDS).train()
    assert ensemble.draws_at_random
    calls = []
    ensemble.register_forward_hook(lambda *args: calls.append(1))
    batch = sampler(encode(corpus, corpus.train))(48, torch.Generator().manual_seed(0))
    seq2seq_seed_loss(ensemble, tuple(ensemble.repeat(t) for t in batch))
    assert len(calls) == 1
    ensemble.eval()
    seq2seq_seed_loss(ensemble, tuple(ensemble.repeat(t) for t in batch))
    assert len(calls) == 3  # in eval mode nothing is drawn: two length groups


def test_length_groups_rejects_bad_input():
    with pytest.raises(ValueError, match="groups"):
        length_groups(
            torch.ones(1, 4, 3, dtype=torch.long), torch.ones(1, 4, 3, dtype=torch.long), 0
        )
    with pytest.raises(ValueError, match="src"):
        length_groups(torch.ones(4, 3, dtype=torch.long), torch.ones(4, 3, dtype=torch.long), 2)


def test_pick_gives_an_ordinary_model_whose_cache_equals_the_alone_model():
    cfg = _encoder_cfg()
    ensemble = stack_seeds(lambda s: EncoderModel(cfg), SEEDS)
    train_seeds(ensemble, LOOKUP.sample, TRAIN, device=CPU)
    torch.manual_seed(1)
    alone = EncoderModel(cfg)
    train(alone, LOOKUP.sample, replace(TRAIN, seed=1), device=CPU, progress=False)
    picked = ensemble.pick(1)
    assert type(picked) is EncoderModel and not picked.training
    x = LOOKUP.sample(5, torch.Generator().manual_seed(7))[0]
    out, cache = run_with_cache(picked, x)
    out_alone, cache_alone = run_with_cache(alone, x)
    assert cache.keys() == cache_alone.keys() and "encoder.layers.1.attn.pattern" in cache
    # k (and so scores) carries b_K, whose float32 drift changes no pattern: compare k - b_K
    for i in range(cfg.n_layers):
        path = f"encoder.layers.{i}.attn"
        for m, c in ((picked, cache), (alone, cache_alone)):
            c[f"{path}.k"] = c[f"{path}.k"] - m.get_parameter(f"{path}.b_K")[:, None]
            del c[f"{path}.scores"]
    assert max((cache[n] - cache_alone[n]).abs().max().item() for n in cache) < 1e-5
    assert (out - out_alone).abs().max() < 1e-5

    # Hooks act on the picked model as on the alone one: flatten every head of layer 0.
    def uniform(pattern, _name):
        return torch.full_like(pattern, 1 / pattern.shape[-1])

    hooked = [run_with_hooks(m, x, fwd_hooks=[("encoder.layers.0.attn.pattern", uniform)])
              for m in (picked, alone)]  # fmt: skip
    assert (hooked[0] - hooked[1]).abs().max() < 1e-5 and (hooked[0] - out).abs().max() > 1e-3
    # The batched forward gives every seed's output at once, equal to the picked models'.
    batched = ensemble(ensemble.repeat(x))  # (seeds, batch, seq, classes)
    for k, model in enumerate(ensemble.unstack()):
        assert (batched[k] - model(x)).abs().max() < 1e-5
    assert not torch.allclose(batched[0], batched[1]), "different seeds, different models"


def test_per_seed_clipping_and_loss_use_each_seed_alone():
    a, b = torch.zeros(2, 3, requires_grad=True), torch.zeros(2, 4, requires_grad=True)
    a.grad = torch.tensor([[3.0, 0, 0], [0.1, 0, 0]])
    b.grad = torch.tensor([[0, 4.0, 0, 0], [0, 0, 0, 0]])
    norms = clip_per_seed([a, b], 1.0)
    assert torch.allclose(norms, torch.tensor([5.0, 0.1]))
    assert torch.allclose(a.grad[0], torch.tensor([0.6, 0, 0]), atol=1e-6)  # seed 0 clipped
    assert torch.equal(a.grad[1], torch.tensor([0.1, 0, 0]))  # seed 1 untouched
    logits = torch.randn(2, 3, 5)
    y = torch.tensor([[1, IGNORE, 2], [IGNORE, IGNORE, 4]])
    loss = seed_cross_entropy(logits, y)
    one = torch.nn.functional.cross_entropy(logits[1], y[1], ignore_index=IGNORE)
    assert torch.allclose(loss[1], one) and loss.shape == (2,)


def test_stack_batches_pads_only_when_asked():
    short, long = (torch.ones(2, 3, dtype=torch.long),), (torch.ones(2, 5, dtype=torch.long),)
    (stacked,) = stack_batches([short, long], pad=(0,))
    assert stacked.shape == (2, 2, 5) and stacked[0, :, 3:].eq(0).all()
    with pytest.raises(ValueError, match="pad"):
        stack_batches([short, long])
    with pytest.raises(TypeError, match="batches\\[1\\] must be a tuple"):
        stack_batches([short, long[0]])
    with pytest.raises(TypeError, match="batches must be a non-empty list"):
        stack_batches([])
    with pytest.raises(TypeError, match="pad must be"):
        stack_batches([short, long], pad=0)
    with pytest.raises(ValueError, match="max_norm"):
        clip_per_seed([torch.zeros(2, 1, requires_grad=True)], 0.0)


def test_bad_input_gives_clear_errors():
    cfg = _encoder_cfg()
    models = [EncoderModel(cfg), EncoderModel(cfg)]
    with pytest.raises(ValueError, match="seeds is empty"):
        stack_seeds(lambda s: EncoderModel(cfg), [])
    with pytest.raises(ValueError, match="models is empty"):
        SeedEnsemble([], [])
    with pytest.raises(ValueError, match="seeds has 1 entries"):
        SeedEnsemble(models, [0])
    with pytest.raises(ValueError, match="repeats a seed"):
        SeedEnsemble(models, [3, 3])
    with pytest.raises(TypeError, match="seeds\\[1\\] must be an int"):
        SeedEnsemble(models, [0, "1"])
    with pytest.raises(ValueError, match="models\\[1\\] differs"):
        SeedEnsemble([models[0], EncoderModel(_encoder_cfg(n_heads=4))], [0, 1])
    with pytest.raises(TypeError, match="models must hold EncoderModel"):
        SeedEnsemble([torch.nn.Linear(2, 2)], [0])
    with pytest.raises(TypeError, match="models must be a list"):
        SeedEnsemble(models[0], [0])
    with pytest.raises(TypeError, match="make must be callable"):
        stack_seeds("EncoderModel", [0])
    ensemble = SeedEnsemble(models, [0, 1])
    with pytest.raises(ValueError, match="k=2 must lie in"):
        ensemble.pick(2)
    with pytest.raises(ValueError, match="tokens must be shaped \\(2 seeds"):
        ensemble(torch.zeros(3, 4, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens holds ids outside"):
        ensemble(torch.full((2, 4, 8), 9))
    with pytest.raises(TypeError, match="cfg must be a TrainConfig"):
        train_seeds(ensemble, LOOKUP.sample, {"steps": 3})
    with pytest.raises(TypeError, match="ensemble must be a SeedEnsemble"):
        train_seeds(models[0], LOOKUP.sample, TRAIN)
    with pytest.raises(ValueError, match="one loss per seed"):
        train_seeds(
            ensemble, LOOKUP.sample, TRAIN, loss_fn=lambda e, b: seed_token_loss(e, b).sum()
        )
