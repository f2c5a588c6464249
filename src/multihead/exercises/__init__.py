"""Checkers for the exercises, one module per chapter.

Each checker takes the reader's answer, tests it against the course's reference on fresh
inputs, prints one line on success and raises ``AssertionError`` with a hint otherwise.
Import them from here, e.g. ``from multihead.exercises import check_attention``.
"""

from multihead.exercises.ch01 import (
    check_attention,
    check_mha_flops,
    check_mha_module,
    check_mha_parameter_count,
)
from multihead.exercises.ch02 import check_swap_heads, check_value_gradient
from multihead.exercises.ch03 import (
    check_bert_large_extra_params,
    check_min_key_size,
    check_realize_rows,
)
from multihead.exercises.ch04 import (
    check_invisible_mixing,
    check_post_mix,
    check_talking_heads_flops,
)
from multihead.exercises.ch05 import (
    check_head_confidence,
    check_positional_share,
    check_subject_head,
)
from multihead.exercises.ch06 import (
    check_distinctness,
    check_layer_spread,
    check_logit_gap_bound,
)
from multihead.exercises.ch07 import (
    check_expected_l0,
    check_hard_concrete,
    check_taylor_importance,
)
from multihead.exercises.ch08 import (
    check_drophead_rescale,
    check_gate_variance,
    check_v_schedule,
)
from multihead.exercises.ch09 import (
    check_classical_mds,
    check_js_divergence,
    check_word_level,
)
from multihead.exercises.ch10 import (
    check_absorbed_scores,
    check_decode_step,
    check_group_kv,
    check_llama3_cache_bytes,
    check_online_step,
)
from multihead.exercises.ch11 import (
    check_induction_build,
    check_patch_head,
    check_prefix_matching,
    check_rope,
)
from multihead.exercises.ch12 import (
    check_find_induction_heads,
    check_head_needed_rank,
    check_mean_pool_kv,
    check_smollm2_cache_bytes,
)
from multihead.exercises.primer import (
    check_causal_mask,
    check_prenorm_block,
    check_sinusoidal,
)

__all__ = [
    "check_absorbed_scores",
    "check_attention",
    "check_bert_large_extra_params",
    "check_causal_mask",
    "check_classical_mds",
    "check_decode_step",
    "check_distinctness",
    "check_drophead_rescale",
    "check_expected_l0",
    "check_find_induction_heads",
    "check_gate_variance",
    "check_group_kv",
    "check_hard_concrete",
    "check_head_confidence",
    "check_head_needed_rank",
    "check_induction_build",
    "check_invisible_mixing",
    "check_js_divergence",
    "check_layer_spread",
    "check_llama3_cache_bytes",
    "check_logit_gap_bound",
    "check_mean_pool_kv",
    "check_mha_flops",
    "check_mha_module",
    "check_mha_parameter_count",
    "check_min_key_size",
    "check_online_step",
    "check_patch_head",
    "check_positional_share",
    "check_post_mix",
    "check_prefix_matching",
    "check_prenorm_block",
    "check_realize_rows",
    "check_rope",
    "check_sinusoidal",
    "check_smollm2_cache_bytes",
    "check_subject_head",
    "check_swap_heads",
    "check_talking_heads_flops",
    "check_taylor_importance",
    "check_v_schedule",
    "check_value_gradient",
    "check_word_level",
]
