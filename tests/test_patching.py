"""Activation patching and head ablation on decoders whose weights are set by hand, so the
answers are known: one where only head (1, 0) reaches the logits, and an induction circuit
(a previous-token head in layer 0, an induction head in layer 1)."""

import math

import pytest
import torch
import torch.nn.functional as F

from multihead.analysis.circuits import (
    copying_score,
    induction_score,
    ov_circuit,
    previous_token_score,
    qk_circuit,
)
from multihead.core.config import ModelConfig
from multihead.core.decoder import Decoder
from multihead.core.hooks import run_with_cache, stack_layers
from multihead.core.model import EncoderModel
from multihead.core.train import IGNORE
from multihead.interventions.ablation import leave_one_out
from multihead.interventions.patching import (
    ablate_heads,
    patch_heads,
    patch_positions,
    patch_set,
)
from multihead.tasks.repeats import RepeatTask

VOCAB, SEQ = 8, 7


@torch.no_grad()
def _one_head_model():
    """Token embeddings in dims 0..7, which the read-out ignores; head (1, 0) alone writes to
    dims 8..11, the only ones the read-out reads. Every other head has W_O = 0."""
    torch.manual_seed(0)
    model = Decoder(VOCAB, SEQ, 12, 2, 2, d_head=3, positions="none", mlp=False, norm=False)
    model = model.double().eval()
    model.embed.weight[:, 8:] = 0.0
    for layer in model.layers:
        layer.attn.W_O.zero_()
    model.layers[1].attn.W_O[0, :, 8:] = torch.randn(3, 4, dtype=torch.float64)
    model.unembed.weight[:, :8] = 0.0
    return model


def _metric(logits):
    return logits[:, -1, 3].sum() - logits[:, -1, 5].sum()


def _pair(changed=None):
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(VOCAB, (3, SEQ), generator=g)
    if changed is None:
        return clean, torch.randint(VOCAB, (3, SEQ), generator=g)
    corrupted = clean.clone()
    corrupted[:, changed] = (clean[:, changed] + 1) % VOCAB
    return clean, corrupted


def test_only_the_head_that_reaches_the_logits_recovers_the_metric():
    model = _one_head_model()
    clean, corrupted = _pair()
    recovered = patch_heads(model, clean, corrupted, _metric)
    assert recovered.shape == (2, 2)
    assert abs(recovered[1, 0] - 1) < 1e-9
    others = torch.ones(2, 2, dtype=torch.bool)
    others[1, 0] = False
    assert (recovered[others] == 0).all()
    # the metric reads the last position: patching the head there alone is enough
    last = patch_heads(model, clean, corrupted, _metric, positions=[SEQ - 1])
    assert abs(last[1, 0] - 1) < 1e-9
    first = patch_heads(model, clean, corrupted, _metric, positions=torch.tensor([0, 2]))
    assert (first == 0).all()
    assert model.training is False


def test_patching_the_residual_stream_finds_the_changed_token():
    model = _one_head_model()
    clean, corrupted = _pair(changed=2)
    recovered = patch_positions(model, clean, corrupted, _metric)
    assert recovered.shape == (2, SEQ)
    # layer 0 writes nothing, so both layers see the token at position 2 and only it
    want = torch.zeros(2, SEQ)
    want[:, 2] = 1.0
    assert (recovered - want).abs().max() < 1e-9


def test_ablating_heads():
    model = _one_head_model()
    tokens, _ = _pair()
    intact = _metric(model(tokens)).item()
    for how in ("mean", "zero"):
        ablated = ablate_heads(model, tokens, _metric, how)
        assert ablated.shape == (2, 2)
        assert torch.allclose(ablated[0], torch.full((2,), intact, dtype=ablated.dtype))
        assert ablated[1, 1].item() == pytest.approx(intact)
    # head (1, 0) zeroed: nothing reaches the logits but the zero biases
    assert ablate_heads(model, tokens, _metric, "zero")[1, 0] == 0.0
    # mean-ablated: every position writes the mean output, read out the same way
    _, cache = run_with_cache(model, tokens)
    mean = cache["layers.1.attn.z"][:, 0].mean(dim=(0, 1))  # (d_head,)
    logit = mean @ model.layers[1].attn.W_O[0] @ model.unembed.weight.T  # (vocab,)
    want = 3 * (logit[3] - logit[5]).item()
    assert ablate_heads(model, tokens, _metric)[1, 0].item() == pytest.approx(want, rel=1e-6)


def test_zero_ablation_is_masking_the_head_in_an_encoder():
    torch.manual_seed(0)
    model = EncoderModel(ModelConfig(vocab_size=9, d_model=16, n_heads=4, max_len=8)).eval()
    tokens = torch.randint(9, (4, 8), generator=torch.Generator().manual_seed(2))

    def metric(logits):
        return logits[:, :, 0].mean()

    ablated = ablate_heads(model, tokens, metric, "zero", layers_path="encoder.layers.{}.attn")
    paths = ["encoder.layers.0.attn", "encoder.layers.1.attn"]
    change = leave_one_out(model, lambda m: {"m": metric(m(tokens)).item()}, paths)["m"]
    assert (ablated - metric(model(tokens)).item() - change).abs().max() < 1e-5


def test_degenerate_and_bad_arguments():
    model = _one_head_model()
    clean, corrupted = _pair()
    with pytest.raises(ValueError, match="nothing to recover"):
        patch_heads(model, clean, clean, _metric)
    with pytest.raises(ValueError, match="nothing to recover"):
        patch_positions(model, clean, corrupted, lambda logits: logits[:, :, :0].sum())
    with pytest.raises(ValueError, match="layers_path"):
        patch_heads(model, clean, corrupted, _metric, layers_path="blocks.{}.attn")
    with pytest.raises(ValueError, match="layers_path"):
        patch_heads(model, clean, corrupted, _metric, layers_path="layers.0.attn")
    with pytest.raises(ValueError, match="layers_path"):
        patch_heads(model, clean, corrupted, _metric, hook="pattern_")
    with pytest.raises(TypeError, match="hook"):
        patch_heads(model, clean, corrupted, _metric, hook=None)
    with pytest.raises(ValueError, match="hook_template"):
        patch_positions(model, clean, corrupted, _metric, hook_template="layers.{}.resid")
    with pytest.raises(TypeError, match="metric"):
        patch_heads(model, clean, corrupted, "logit diff")
    with pytest.raises(TypeError, match="metric"):
        patch_heads(model, clean, corrupted, lambda logits: logits[:, -1, 0])
    with pytest.raises(ValueError, match="corrupted"):
        patch_heads(model, clean, corrupted[:, :5], _metric)
    with pytest.raises(TypeError, match="clean"):
        patch_positions(model, clean.tolist(), corrupted, _metric)
    with pytest.raises(ValueError, match="positions"):
        patch_heads(model, clean, corrupted, _metric, positions=[SEQ])
    with pytest.raises(ValueError, match="positions"):
        patch_heads(model, clean, corrupted, _metric, positions=[])
    with pytest.raises(TypeError, match="positions"):
        patch_heads(model, clean, corrupted, _metric, positions=[0.5])
    with pytest.raises(ValueError, match="how"):
        ablate_heads(model, clean, _metric, "max")
    with pytest.raises(TypeError, match="tokens"):
        ablate_heads(model, None, _metric)


# ---------------------------------------------------------------- an induction circuit
V, SEGMENT, PREFIX = 12, 5, 1  # tokens 0..10 and a BOS token 11
N = PREFIX + 2 * SEGMENT
TOK, POS, PREV, OUT = 0, V, V + N, 2 * V + N  # where each subspace starts
D_MODEL, D_HEAD, SHARP = 3 * V + N, max(V, N), 20.0


@torch.no_grad()
def _induction_model():
    """Residual dims: the token (one-hot), the position (one-hot), the previous token (which
    head (0, 0) writes) and the copied token (which head (1, 0) writes, the read-out reads).
    Head (0, 0) at position i attends to i - 1; head (1, 0) attends to keys whose previous
    token is its own token and copies theirs. Heads (0, 1) and (1, 1) are zero."""
    model = Decoder(V, N, D_MODEL, 2, 2, d_head=D_HEAD, mlp=False, norm=False).double()
    for p in model.parameters():
        p.zero_()
    c = SHARP * math.sqrt(D_HEAD)  # a score gap of SHARP after the 1 / sqrt(d_head) scale
    eye_v, eye_n = torch.eye(V, dtype=torch.float64), torch.eye(N, dtype=torch.float64)
    model.embed.weight[:, TOK : TOK + V] = eye_v
    model.pos.weight[:, POS : POS + N] = eye_n
    prev, ind = model.layers[0].attn, model.layers[1].attn
    prev.W_Q[0, POS + 1 : POS + N, : N - 1] = c * eye_n[1:, 1:]  # position i asks for i - 1
    prev.W_K[0, POS : POS + N, :N] = eye_n
    prev.W_V[0, TOK : TOK + V, :V] = eye_v
    prev.W_O[0, :V, PREV : PREV + V] = eye_v
    ind.W_Q[0, TOK : TOK + V, :V] = c * eye_v  # token t asks for "previous token t"
    ind.W_K[0, PREV : PREV + V, :V] = eye_v
    ind.W_V[0, TOK : TOK + V, :V] = eye_v
    ind.W_O[0, :V, OUT : OUT + V] = eye_v
    model.unembed.weight[:, OUT : OUT + V] = 10.0 * eye_v
    return model.eval()


def _repeated(batch=4, seed=0):
    """BOS, then a segment of distinct tokens, twice; and 5 other tokens, none in the
    segment, for a corrupted first copy. Shapes: -> (batch, N), (batch, SEGMENT)."""
    g = torch.Generator().manual_seed(seed)
    order = torch.rand(batch, V - 1, generator=g).argsort(1)  # (batch, 11): tokens 0..10
    segment, others = order[:, :SEGMENT], order[:, SEGMENT : 2 * SEGMENT]
    bos = torch.full((batch, 1), V - 1)
    return torch.cat([bos, segment, segment], dim=1), others


def test_a_hand_built_induction_circuit_scores_and_predicts():
    model, (tokens, _) = _induction_model(), _repeated()
    logits, cache = run_with_cache(model, tokens)
    patterns = stack_layers(cache, "layers.{}.attn.pattern").mean(1)  # (layers, heads, n, n)
    assert previous_token_score(patterns[0, 0]) > 0.999
    assert induction_score(patterns[1, 0], SEGMENT, PREFIX) > 0.999
    assert previous_token_score(patterns[1, 0]) < 0.3
    task = RepeatTask(vocab_size=V, segment=SEGMENT, prefix=PREFIX)
    y = torch.full_like(tokens, IGNORE)
    y[:, :-1] = tokens[:, 1:]
    losses = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
    assert (losses[:, task.second_copy] < 1e-3).all()
    assert (task.in_context_loss(losses) < -1.0).all()
    # the circuits, read from the weights
    W_E, W_U = model.embed.weight, model.unembed.weight.T
    ov = ov_circuit(W_E, model.layers[1].attn.W_V, model.layers[1].attn.W_O, W_U)
    assert torch.equal(ov[0], 10.0 * torch.eye(V, dtype=torch.float64))
    assert copying_score(ov[0]).item() == pytest.approx(1.0)
    assert torch.isnan(copying_score(ov[1]))  # a head that writes nothing
    prev = model.layers[0].attn
    qk = qk_circuit(model.pos.weight, prev.W_Q, prev.W_K)[0]  # positions in place of tokens
    assert torch.equal(qk[1:].argmax(-1), torch.arange(N - 1))  # position i scores i - 1


def test_patching_the_induction_circuit():
    model, (clean, others) = _induction_model(), _repeated()
    corrupted = clean.clone()
    corrupted[:, PREFIX : PREFIX + SEGMENT] = others  # a first copy that shares no token
    second = RepeatTask(vocab_size=V, segment=SEGMENT, prefix=PREFIX).second_copy
    answers = clean[:, second + 1]  # what the second copy predicts on the clean input

    def metric(logits):  # the mean logit of the clean answers
        return logits[:, second].gather(-1, answers[..., None]).mean()

    recovered = patch_heads(model, clean, corrupted, metric)
    assert abs(recovered[1, 0] - 1) < 1e-9 and (recovered[:, 1] == 0).all()
    # the previous-token head decides where head (1, 0) looks, not what it copies there:
    # patched alone, it sends head (1, 0) to the right places, which hold corrupted tokens
    assert abs(recovered[0, 0]) < 0.05
    # one changed token in the first copy: layer 0 sees it where it is; layer 1 there (the
    # token copied from it) and one position later (where head (0, 0) wrote it as the
    # previous token, which the next query looks for)
    changed = clean.clone()
    changed[:, PREFIX + 2] = others[:, 0]
    by_position = patch_positions(model, clean, changed, metric)
    at, after = PREFIX + 2, PREFIX + 3
    want = torch.zeros(N)
    want[at] = 1.0
    assert torch.equal(by_position[0], want)
    elsewhere = [i for i in range(N) if i not in (at, after)]
    assert by_position[1, elsewhere].abs().max() < 1e-6
    assert 0.3 < by_position[1, at] < 0.7 and 0.3 < by_position[1, after] < 0.7


def test_first_order_ablation_is_the_first_order_change_of_removing_a_head():
    import torch.nn.functional as F

    from multihead.core.decoder import Decoder
    from multihead.core.hooks import run_with_hooks
    from multihead.interventions.patching import first_order_ablation

    torch.manual_seed(0)
    model = Decoder(10, 8, 16, 2, 2, mlp=False, norm=False).double()
    x = torch.randint(10, (4, 8))

    def metric(logits):
        return F.cross_entropy(logits[:, -1], x[:, 0])

    for p in model.parameters():  # the caller's gradients must survive
        p.grad = torch.full_like(p, 7.0)
    grads = first_order_ablation(model, x, metric)
    assert grads.shape == (2, 2)
    assert all(bool((p.grad == 7.0).all()) for p in model.parameters())
    eps = 1e-6
    for layer in range(2):
        for head in range(2):

            def scale(z, _name, head=head, f=1 + eps):
                z = z.clone()
                z[:, head] = z[:, head] * f
                return z

            path = f"layers.{layer}.attn.z"
            up = metric(run_with_hooks(model, x, fwd_hooks=[(path, scale)]))
            down = metric(
                run_with_hooks(
                    model, x, fwd_hooks=[(path, lambda z, n, h=head: scale(z, n, h, 1 - eps))]
                )
            )
            # d metric / d f at f = 1 is <z, d metric / dz>; zeroing z changes it by minus that
            assert abs(-(up - down).item() / (2 * eps) - grads[layer, head].item()) < 1e-5


def test_patching_a_set_of_heads_together():
    model = _one_head_model()
    clean, corrupted = _pair()
    alone = patch_heads(model, clean, corrupted, _metric)
    both = {"layers.1.attn.z": [0, 1]}
    assert patch_set(model, clean, corrupted, _metric, both) == pytest.approx(1.0, abs=1e-9)
    assert patch_set(model, clean, corrupted, _metric, {"layers.1.attn.z": [1]}) == 0.0
    # one head as a set is that head patched alone
    for layer in range(2):
        for head in range(2):
            one = patch_set(model, clean, corrupted, _metric, {f"layers.{layer}.attn.z": [head]})
            assert one == pytest.approx(alone[layer, head].item(), abs=1e-9)
    assert patch_set(model, clean, corrupted, _metric, {}) == 0.0
    assert model.training is False


def test_patching_the_induction_circuit_as_a_set():
    # a whole first copy corrupted: each head alone recovers its part, both together all
    model, (clean, others) = _induction_model(), _repeated()
    corrupted = clean.clone()
    corrupted[:, PREFIX : PREFIX + SEGMENT] = others
    second = RepeatTask(vocab_size=V, segment=SEGMENT, prefix=PREFIX).second_copy
    answers = clean[:, second + 1]

    def metric(logits):
        return logits[:, second].gather(-1, answers[..., None]).mean()

    circuit = {"layers.0.attn.z": [0], "layers.1.attn.z": [0]}
    assert patch_set(model, clean, corrupted, metric, circuit) == pytest.approx(1.0, abs=1e-9)


def test_patch_set_bad_arguments():
    model = _one_head_model()
    clean, corrupted = _pair()
    with pytest.raises(TypeError, match="heads must be a dict"):
        patch_set(model, clean, corrupted, _metric, [("layers.1.attn.z", [0])])
    with pytest.raises(ValueError, match="not a hook point"):
        patch_set(model, clean, corrupted, _metric, {"layers.7.attn.z": [0]})
    with pytest.raises(TypeError, match="list of head indices"):
        patch_set(model, clean, corrupted, _metric, {"layers.1.attn.z": 0})
    with pytest.raises(ValueError, match="nothing to recover"):
        patch_set(model, clean, clean, _metric, {"layers.1.attn.z": [0]})
