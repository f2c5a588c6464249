"""Checkers refuse an answer that calls the package's own solution.

For every exercise the package already answers, a one-line wrapper of the package's function
passes the comparison but must fail with "your answer calls multihead...: write it yourself".
The reference answers (tests/exercise_answers.py, run by test_exercise_stubs.py) call nothing
of the package and still pass.
"""

import sys

import exercise_answers as answers
import pytest
import torch

from multihead import exercises as ex
from multihead.analysis.circuits import induction_score
from multihead.analysis.cost import attention_cost, kv_cache_bytes
from multihead.analysis.diversity import distinctness, js_logit_bound, logit_gap
from multihead.analysis.diversity import within_layer_spread as spread
from multihead.analysis.headrank import needed_rank, visible_block
from multihead.analysis.lowrank import min_key_size, realize
from multihead.analysis.metrics import classical_mds, head_confidence, js_divergence
from multihead.core.attention import MultiHeadAttention, attention_pattern, blocked
from multihead.core.model import count_parameters
from multihead.core.positions import sinusoidal_positions
from multihead.core.talking_heads import TalkingHeadsAttention
from multihead.exercises._common import refuse_reference
from multihead.interventions.drophead import drophead_rate, gate_moments
from multihead.interventions.gates import expected_l0, hard_concrete
from multihead.pretrained.load import word_level

WRAPPERS = [  # (checker, a one-line wrapper of the package's answer, the name refused)
    (ex.check_attention, lambda q, k, v, mask=None: attention_pattern(q, k, mask) @ v,
     "core.attention.attention_pattern"),
    (ex.check_mha_parameter_count,
     lambda d, h, dk, dv: count_parameters(MultiHeadAttention(d, h, dk, dv)),
     "core.attention.MultiHeadAttention.__init__"),
    (ex.check_mha_parameter_count, lambda d, h, dk, dv: attention_cost(d, h, dk, dv, 1)["params"],
     "analysis.cost.attention_cost"),
    (ex.check_mha_flops, lambda d, h, dk, dv, n: attention_cost(d, h, dk, dv, n)["flops"],
     "analysis.cost.attention_cost"),
    (ex.check_mha_module, MultiHeadAttention, "core.attention.MultiHeadAttention.__init__"),
    (ex.check_realize_rows, lambda X, P: realize(X.T, P.T), "analysis.lowrank.realize"),
    (ex.check_min_key_size, min_key_size, "analysis.lowrank.min_key_size"),
    (ex.check_bert_large_extra_params,
     lambda: 24 * (attention_cost(1024, 16, 128, 64, 1)["params"]
                   - attention_cost(1024, 16, 64, 64, 1)["params"]),
     "analysis.cost.attention_cost"),
    (ex.check_post_mix, TalkingHeadsAttention.mix, "core.talking_heads.TalkingHeadsAttention.mix"),
    (ex.check_head_confidence, head_confidence, "analysis.metrics.head_confidence"),
    (ex.check_layer_spread, lambda d: spread(d)["mean"], "analysis.diversity.within_layer_spread"),
    (ex.check_distinctness, distinctness, "analysis.diversity.distinctness"),
    (ex.check_logit_gap_bound, lambda a, b: js_logit_bound(logit_gap(a, b)),
     "analysis.diversity.logit_gap"),
    (ex.check_hard_concrete, hard_concrete, "interventions.gates.hard_concrete"),
    (ex.check_expected_l0, expected_l0, "interventions.gates.expected_l0"),
    (ex.check_gate_variance, lambda h, p: gate_moments(h, p)["variance"],
     "interventions.drophead.gate_moments"),
    (ex.check_v_schedule, lambda s, total, p, turn: drophead_rate(s, total, p, "v", turn),
     "interventions.drophead.drophead_rate"),
    (ex.check_js_divergence, js_divergence, "analysis.metrics.js_divergence"),
    (ex.check_word_level, word_level, "pretrained.load.word_level"),
    (ex.check_classical_mds, classical_mds, "analysis.metrics.classical_mds"),
    (ex.check_sinusoidal, lambda n, d: sinusoidal_positions(n, d),
     "core.positions.sinusoidal_positions"),
    (ex.check_causal_mask, lambda n: blocked(None, True, n, n, "cpu"), "core.attention.blocked"),
    (ex.check_prenorm_block, lambda layer, x: layer(x), "core.model.Layer.forward"),
    (ex.check_llama3_cache_bytes,
     lambda: kv_cache_bytes(n_layers=32, n_kv_heads=8, d_head=128, n_tokens=8192),
     "analysis.cost.kv_cache_bytes"),
    (ex.check_smollm2_cache_bytes,
     lambda: kv_cache_bytes(n_layers=30, n_kv_heads=3, d_head=64, n_tokens=8192),
     "analysis.cost.kv_cache_bytes"),
    (ex.check_find_induction_heads,
     lambda p, s, threshold=0.5: [tuple(x) for x in (torch.stack(
         [induction_score(layer, s) for layer in p]).mean(1) > threshold).nonzero().tolist()],
     "analysis.circuits.induction_score"),
    (ex.check_head_needed_rank,
     lambda s, tol: int(needed_rank(visible_block(s), [tol])[0]),
     "analysis.headrank.visible_block"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("checker", "wrapper", "name"),
    WRAPPERS,
    ids=[f"{c.__name__}-{n.rsplit('.', 1)[-1]}" for c, _, n in WRAPPERS],
)
def test_a_wrapper_of_the_package_answer_is_refused(checker, wrapper, name):
    with pytest.raises(AssertionError, match=rf"your answer calls multihead\.{name}: write it"):
        checker(wrapper)
    assert sys.getprofile() is None  # the hook is gone after the refusal


def test_the_package_answer_is_refused_through_the_readers_own_helper():
    def helper(P):
        return min_key_size(P)

    def my_min_key_size(P):
        return helper(P)  # two calls deep, still the package's answer

    with pytest.raises(AssertionError, match="lowrank.min_key_size"):
        ex.check_min_key_size(my_min_key_size)


def test_a_written_answer_passes_and_the_hook_is_removed():
    assert ex.check_min_key_size(answers.my_min_key_size).startswith("Correct")
    assert ex.check_prenorm_block(answers.my_prenorm_block).startswith("Correct")
    assert sys.getprofile() is None


def test_refuse_reference_keeps_errors_and_results():
    guarded = refuse_reference(lambda x: x + 1, min_key_size)
    assert guarded(1) == 2

    def broken(_):
        raise ValueError("the reader's own bug")

    with pytest.raises(ValueError, match="own bug"):
        refuse_reference(broken, min_key_size)(0)
    assert sys.getprofile() is None
    with pytest.raises(TypeError, match="cannot trace"):
        refuse_reference(len, 3)
