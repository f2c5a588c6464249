"""Greedy decoding with and without the KV cache, and the cache's memory against the formula.

Run from the repository root:  python benchmarks/kv_cache_speed.py [--device cuda]

For each layout (multi-head, grouped-query with 2 key/value heads, multi-query, latent) and
each number of generated tokens, the same model generates from the same prompt twice: feeding
one token per step with the cache, and the whole prefix every step without it. Times are
medians over interleaved rounds (``multihead.timing.median_times``); the ratio (without /
with) is printed side by side. The cache's bytes after decoding are measured on the tensors it
holds and compared with ``kv_cache_bytes`` / ``latent_cache_bytes``. Nothing is asserted but
the memory equality: speed depends on the machine.
"""

from __future__ import annotations

import argparse

import torch

from multihead.analysis.cost import kv_cache_bytes, latent_cache_bytes
from multihead.core.decoder import Decoder
from multihead.timing import median_times

LAYOUTS = {
    "MHA": {"n_kv_heads": 8},
    "GQA-2": {"n_kv_heads": 2},
    "MQA": {"n_kv_heads": 1},
    "MLA": {"d_latent": 32},
}
D_MODEL, N_LAYERS, N_HEADS, PROMPT = 128, 4, 8, 16


def cache_bytes(model: Decoder, prompt: torch.Tensor, n_new: int) -> tuple[int, int]:
    """Measured bytes of the cache after decoding ``n_new`` tokens, and the formula's."""
    cache = model.new_cache()
    model(prompt, None, cache)
    for _ in range(n_new - 1):  # the last generated token is never fed back
        model(torch.zeros_like(prompt[:, :1]), None, cache)
    attn, n = model.layers[0].attn, prompt.shape[1] + n_new - 1
    size = next(model.parameters()).element_size()
    if hasattr(attn, "d_latent"):
        want = latent_cache_bytes(n_layers=N_LAYERS, d_latent=attn.d_latent, n_tokens=n,
                                  batch=prompt.shape[0], bytes_per_value=size)  # fmt: skip
    else:
        want = kv_cache_bytes(n_layers=N_LAYERS, n_kv_heads=attn.n_kv_heads, d_head=attn.d_head,
                              n_tokens=n, batch=prompt.shape[0], bytes_per_value=size)  # fmt: skip
    return sum(c.nbytes() for c in cache), want


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 480])
    args = parser.parse_args()
    device = torch.device(args.device)
    max_len = PROMPT + max(args.lengths)
    print(f"device {device}; {N_LAYERS} layers, width {D_MODEL}, {N_HEADS} query heads; "
          f"prompt {PROMPT} tokens, batch 1; medians of {args.rounds} rounds")  # fmt: skip
    print(f"{'layout':6s} {'new tokens':>10s} {'cached s':>9s} {'full s':>9s} {'ratio':>6s} "
          f"{'cache bytes':>12s} {'formula':>9s}")  # fmt: skip
    for name, kwargs in LAYOUTS.items():
        torch.manual_seed(0)
        model = Decoder(64, max_len, D_MODEL, N_LAYERS, N_HEADS, **kwargs).to(device).eval()
        prompt = torch.randint(64, (1, PROMPT), device=device)
        for n in args.lengths:
            times = median_times(
                {
                    "cached": lambda m=model, p=prompt, n=n: m.generate(p, n),
                    "full": lambda m=model, p=prompt, n=n: m.generate(p, n, use_cache=False),
                },
                rounds=args.rounds,
                number=1,
                warmup=1,
            )
            measured, formula = cache_bytes(model, prompt, n)
            assert measured == formula, (name, n, measured, formula)
            cached, full = times["cached"], times["full"]
            print(f"{name:6s} {n:10d} {cached:9.3f} {full:9.3f} {full / cached:6.1f} "
                  f"{measured:12d} {formula:9d}")  # fmt: skip


if __name__ == "__main__":
    main()
