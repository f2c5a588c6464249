"""What attention costs: parameters and forward FLOPs of one self-attention layer.

FLOPs count a multiply-add as 2 and cover the matrix products only: the four projections,
the logits ``Q K^T`` and the weighted sum ``P V`` (softmax, scaling and biases left out).
"""

from __future__ import annotations

from multihead._checks import check_positive_int


def attention_cost(
    d_model: int, n_heads: int, d_key: int, d_value: int, seq_len: int
) -> dict[str, int]:
    """Parameters and forward FLOPs of one self-attention layer (biases included).

    Parameters include the biases; FLOPs are counted as in the module docstring.

    Shapes: none -> {"params", "flops", "flops_logits"}.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("d_key", d_key)):
        check_positive_int(name, v)
    check_positive_int("d_value", d_value)
    check_positive_int("seq_len", seq_len)
    hk, hv = n_heads * d_key, n_heads * d_value
    params = 2 * (d_model * hk + hk) + (d_model * hv + hv) + (hv * d_model + d_model)
    proj = 2 * seq_len * d_model * (2 * hk + 2 * hv)  # W_Q, W_K, W_V and W_O
    logits = 2 * seq_len * seq_len * hk
    mix = 2 * seq_len * seq_len * hv
    return {"params": params, "flops": proj + logits + mix, "flops_logits": logits}


def matched_key_size(d_model: int, n_heads: int, d_value: int, params: int) -> int:
    """The key size ``d_key >= 1`` whose layer (``n_heads`` heads of value size ``d_value``)
    has the attention parameter count closest to ``params``: the equal-parameter partner of
    a layer, when the key size grows and the value size or the number of heads shrinks.

    The count is linear in ``d_key`` with slope ``2 n_heads (d_model + 1)`` (``W_Q``, ``W_K``
    and their biases), so an exact match exists only when that slope divides the difference;
    compare ``attention_cost(...)["params"]`` with ``params`` to see how close it is.

    Shapes: none.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("d_value", d_value)):
        check_positive_int(name, v)
    check_positive_int("params", params)
    rest = attention_cost(d_model, n_heads, 1, d_value, seq_len=1)["params"]
    slope = 2 * n_heads * (d_model + 1)  # parameters per unit of d_key
    if params < rest:
        raise ValueError(
            f"params={params} is below the {rest} parameters of d_key=1 with n_heads={n_heads} "
            f"and d_value={d_value}; lower n_heads or d_value"
        )
    return 1 + round((params - rest) / slope)
