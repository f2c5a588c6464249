import math

import pytest
import torch

from multihead.analysis.circuits import (
    copying_score,
    induction_score,
    ov_circuit,
    previous_token_score,
    qk_circuit,
)


def _previous_token_pattern(n):
    p = torch.zeros(n, n, dtype=torch.float64)
    p[0, 0] = 1.0  # the first token has nothing before it
    p[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    return p


def _uniform_causal(n):
    p = torch.ones(n, n, dtype=torch.float64).tril()
    return p / p.sum(-1, keepdim=True)


def _induction_pattern(segment, prefix):
    n = prefix + 2 * segment
    p = _uniform_causal(n)
    for i in range(prefix + segment, n):
        p[i] = 0.0
        p[i, i - segment + 1] = 1.0
    return p


def test_previous_token_score_of_known_patterns():
    n = 6
    assert previous_token_score(_previous_token_pattern(n)) == 1.0
    assert previous_token_score(torch.eye(n)) == 0.0
    uniform = previous_token_score(_uniform_causal(n))
    assert math.isclose(uniform.item(), sum(1 / (i + 1) for i in range(1, n)) / (n - 1))
    stacked = torch.stack([_previous_token_pattern(n), torch.eye(n, dtype=torch.float64)])
    batch = stacked[None].expand(3, 2, n, n)  # (batch, heads, n, n)
    assert torch.equal(previous_token_score(batch), torch.tensor([[1.0, 0.0]] * 3).double())


@pytest.mark.parametrize("segment,prefix", [(4, 0), (5, 3), (1, 2)])
def test_induction_score_of_known_patterns(segment, prefix):
    p = _induction_pattern(segment, prefix)
    assert induction_score(p, segment, prefix) == 1.0
    n = prefix + 2 * segment
    if segment > 2:  # key i - segment + 1 is not the previous token
        assert induction_score(_previous_token_pattern(n), segment, prefix) == 0.0
    # a longer sequence (a third copy) is fine: the score reads the second copy only
    longer = torch.eye(n + segment, dtype=torch.float64)
    longer[:n, :n] = p
    assert induction_score(longer, segment, prefix) == 1.0
    # half the weight on the right key in every second-copy query
    mixed = 0.5 * p + 0.5 * torch.eye(n, dtype=torch.float64)
    want = 0.5 if segment > 1 else 1.0  # segment 1: key i - 1 + 1 is the query itself
    assert induction_score(mixed[None, None], segment, prefix).item() == want


def test_qk_circuit_is_the_weight_product_per_head():
    g = torch.Generator().manual_seed(0)
    W_E = torch.randn(7, 5, generator=g, dtype=torch.float64)
    W_Q = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    W_K = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    qk = qk_circuit(W_E, W_Q, W_K)
    assert qk.shape == (4, 7, 7)
    for h in range(4):
        assert torch.allclose(qk[h], W_E @ W_Q[h] @ W_K[h].T @ W_E.T, atol=1e-12)
    # grouped-query keys: head h reads key head h // 2
    shared = W_K[:2]
    grouped = qk_circuit(W_E, W_Q, shared)
    assert torch.allclose(grouped, qk_circuit(W_E, W_Q, shared.repeat_interleave(2, 0)))
    # one-hot embeddings and W_Q W_K^T = the identity: a token attends to itself
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.equal(qk_circuit(eye, eye[None], eye[None]), eye[None])


def test_ov_circuit_and_copying_scores_of_known_circuits():
    eye = torch.eye(4, dtype=torch.float64)
    identity = ov_circuit(eye, eye[None], eye[None], eye)
    assert torch.equal(identity, eye[None])
    assert copying_score(identity).item() == pytest.approx(1.0, abs=1e-12)
    negated = ov_circuit(eye, eye[None], -eye[None], eye)
    assert copying_score(negated).item() == pytest.approx(-1.0, abs=1e-12)
    g = torch.Generator().manual_seed(1)
    W_E, W_U = torch.randn(6, 5, generator=g), torch.randn(5, 6, generator=g)
    W_V, W_O = torch.randn(1, 5, 2, generator=g), torch.randn(3, 2, 5, generator=g)
    ov = ov_circuit(W_E, W_V, W_O, W_U)  # multi-query: one value head for three heads
    assert ov.shape == (3, 6, 6)
    for h in range(3):
        assert torch.allclose(ov[h], W_E @ W_V[0] @ W_O[h] @ W_U, atol=1e-5)
    # a circuit and its transpose (Elhage et al.'s orientation) copy alike
    assert torch.allclose(copying_score(ov), copying_score(ov.transpose(-2, -1)), atol=1e-5)


def test_copying_score_weighs_eigenvalues():
    assert copying_score(torch.diag(torch.tensor([1.0, 2.0, -1.0]))).item() == pytest.approx(0.5)
    quarter_turn = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues +i and -i
    assert copying_score(quarter_turn).item() == pytest.approx(0.0, abs=1e-7)
    scaled = 3.0 * torch.eye(5)
    assert copying_score(scaled).item() == pytest.approx(1.0)
    batch = torch.stack([torch.eye(3), -torch.eye(3)])
    assert torch.allclose(copying_score(batch), torch.tensor([1.0, -1.0]))
    assert torch.isnan(copying_score(torch.zeros(3, 3)))
    assert copying_score(torch.eye(3, dtype=torch.float64)).dtype == torch.float64


def test_bad_arguments_name_themselves():
    p = _uniform_causal(6)
    with pytest.raises(ValueError, match="pattern"):
        previous_token_score(p[:, :5])
    with pytest.raises(ValueError, match="pattern"):
        previous_token_score(torch.ones(1, 1))
    with pytest.raises(ValueError, match="pattern"):
        previous_token_score(-p)
    with pytest.raises(ValueError, match="segment"):
        induction_score(p, 0)
    with pytest.raises(ValueError, match="prefix"):
        induction_score(p, 2, -1)
    with pytest.raises(ValueError, match="prefix \\+ 2 \\* segment"):
        induction_score(p, 3, 1)
    eye = torch.eye(4)
    with pytest.raises(ValueError, match="W_Q"):
        qk_circuit(eye, eye, eye[None])
    with pytest.raises(ValueError, match="W_K"):
        qk_circuit(eye, torch.zeros(3, 4, 2), torch.zeros(2, 4, 2))
    with pytest.raises(ValueError, match="d_model"):
        qk_circuit(eye, torch.zeros(1, 3, 2), torch.zeros(1, 3, 2))
    with pytest.raises(ValueError, match="W_U"):
        ov_circuit(eye, eye[None], eye[None], eye[:3])
    with pytest.raises(TypeError, match="W_E"):
        ov_circuit(eye.long(), eye[None], eye[None], eye)
    with pytest.raises(ValueError, match="ov"):
        copying_score(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="ov"):
        copying_score(torch.full((2, 2), float("nan")))


def test_induction_score_per_sequence_layouts():
    from multihead.tasks.repeats import RepeatTask

    task = RepeatTask(vocab_size=10, segment=5, min_segment=3)
    _, _, lengths, starts = task.sample_layout(6, torch.Generator().manual_seed(0))
    n = task.seq_len
    pattern = torch.zeros(6, 2, n, n)
    pattern[..., 0] = 1.0  # every query on the first token ...
    for b in range(6):
        L, s = int(lengths[b]), int(starts[b])
        for q in range(s + L, s + 2 * L):  # ... but head 0's second-copy queries induct
            pattern[b, 0, q] = 0.0
            pattern[b, 0, q, q - L + 1] = 1.0
    scores = induction_score(pattern, lengths, starts)
    assert scores.shape == (6, 2)
    assert torch.allclose(scores[:, 0], torch.ones(6)) and scores[:, 1].max() < 1
    fixed = induction_score(pattern[:1], int(lengths[0]), int(starts[0]))
    assert torch.allclose(fixed, scores[:1])
    with pytest.raises(ValueError, match="per-sequence"):
        induction_score(pattern[0, 0], lengths, starts)
