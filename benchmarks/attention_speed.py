"""Forward + backward time of our MultiHeadAttention against torch.nn.MultiheadAttention.

Run from the repository root:  python benchmarks/attention_speed.py [--device cuda]

All four variants see the same inputs in the same run; times are medians over
interleaved rounds (``multihead.timing.median_times``), and the ratios are printed
side by side. "pattern exposed" is our explicit path (``materialize = True``), the one
``run_with_cache`` takes to record the pattern.
Nothing here is asserted: speed depends on the machine, so it is measured and reported.
"""

from __future__ import annotations

import argparse

import torch

from multihead.analysis.cost import attention_cost
from multihead.core.attention import MultiHeadAttention
from multihead.core.convert import to_torch_multihead
from multihead.timing import median_times

CONFIGS = [
    {"batch": 32, "seq": 64, "d_model": 128, "n_heads": 8},
    {"batch": 16, "seq": 256, "d_model": 512, "n_heads": 8},
]


def _step(fn, x):
    def run():
        x.grad = None
        fn(x).sum().backward()

    return run


def measure(cfg: dict, device: torch.device, rounds: int) -> dict[str, float]:
    torch.manual_seed(0)
    ours = MultiHeadAttention(cfg["d_model"], cfg["n_heads"]).to(device)
    ref = to_torch_multihead(ours).to(device)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d_model"], device=device, requires_grad=True)

    exposed = MultiHeadAttention(cfg["d_model"], cfg["n_heads"]).to(device)
    exposed.load_state_dict(ours.state_dict())
    exposed.materialize = True  # the explicit path: scores and pattern are computed

    variants = {
        "ours, fused path": lambda t: ours(t),
        "ours, pattern exposed": lambda t: exposed(t),
        "torch, need_weights=False": lambda t: ref(t, t, t, need_weights=False)[0],
        "torch, need_weights=True": lambda t: ref(
            t, t, t, need_weights=True, average_attn_weights=False
        )[0],
    }
    return median_times(
        {name: _step(fn, x) for name, fn in variants.items()}, rounds=rounds, number=3, grad=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per variant")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"device: {device}, torch {torch.__version__}, threads: {torch.get_num_threads()}")
    for cfg in CONFIGS:
        times = measure(cfg, device, args.rounds)
        # Forward matmul FLOPs; backward costs about twice the forward.
        flops = (
            3
            * cfg["batch"]
            * attention_cost(
                cfg["d_model"],
                cfg["n_heads"],
                cfg["d_model"] // cfg["n_heads"],
                cfg["d_model"] // cfg["n_heads"],
                cfg["seq"],
            )["flops"]
        )
        base = times["torch, need_weights=False"]
        base_w = times["torch, need_weights=True"]
        print(f"\n{cfg}")
        print(
            f"{'variant':28s} {'ms':>8s} {'GFLOP/s':>8s} {'vs torch nw=False':>18s} "
            f"{'vs torch nw=True':>17s}"
        )
        for name, t in times.items():
            print(
                f"{name:28s} {t * 1e3:8.2f} {flops / t / 1e9:8.1f} {t / base:18.2f} "
                f"{t / base_w:17.2f}"
            )


if __name__ == "__main__":
    main()
