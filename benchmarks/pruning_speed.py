"""What removing heads saves: parameters and forward time, pruned against full, in one run.

Run from the repository root:  python benchmarks/pruning_speed.py [--device cuda]

Two measurements, each printed as ratios side by side:

1. the encoder-decoder of the pruning chapter (sizes of ``translation.default_configs``, random
   weights: speed does not depend on them) with a share of the heads of every attention module
   removed by ``pruning.prune_model`` (at least one head kept per module), on a batch of
   teacher-forced sentences;
2. a single ``MultiHeadAttention`` layer at several sizes with half of its heads removed.

Times are medians over interleaved rounds (``timing.median_times``), so a slow moment of the
machine hits both variants alike. Nothing is asserted: speed depends on the machine.
"""

from __future__ import annotations

import argparse
import copy

import torch

from multihead.core.attention import MultiHeadAttention
from multihead.core.config import ModelConfig
from multihead.core.model import EncoderDecoder, attention_modules, count_parameters
from multihead.interventions.pruning import prune_model
from multihead.timing import median_times

LAYERS = [
    {"batch": 64, "seq": 24, "d_model": 64, "n_heads": 4},
    {"batch": 32, "seq": 128, "d_model": 256, "n_heads": 8},
    {"batch": 16, "seq": 256, "d_model": 512, "n_heads": 16},
]


def _masks(model: torch.nn.Module, share: float, generator: torch.Generator) -> dict:
    """Remove ``share`` of each module's heads at random, keeping at least one."""
    masks = {}
    for name, m in attention_modules(model):
        n_drop = min(round(share * m.n_heads), m.n_heads - 1)
        mask = torch.ones(m.n_heads)
        mask[torch.randperm(m.n_heads, generator=generator)[:n_drop]] = 0.0
        masks[name] = mask
    return masks


def model_rows(device: torch.device, rounds: int) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=200, n_classes=200, d_model=64, n_heads=4, n_layers=3,
        n_decoder_layers=3, d_ff=128, max_len=32,
    )  # fmt: skip
    full = EncoderDecoder(cfg).to(device).eval()
    src = torch.randint(2, 200, (256, 14), device=device)
    tgt = torch.randint(2, 200, (256, 16), device=device)
    print("\nencoder-decoder, 3+3 layers x 4 heads, d_model 64, 256 sentences (forward)")
    print(f"{'removed':>8} {'heads':>6} {'params ratio':>13} {'time ratio':>11} {'speed-up':>9}")
    gen = torch.Generator().manual_seed(0)
    for share in (0.25, 0.5, 0.75):
        masks = _masks(full, share, gen)
        pruned = prune_model(copy.deepcopy(full), masks).eval()
        times = median_times(
            {"full": lambda: full(src, tgt), "pruned": lambda p=pruned: p(src, tgt)},
            rounds=rounds,
        )
        heads = sum(m.n_heads for _, m in attention_modules(pruned))
        ratio = count_parameters(pruned) / count_parameters(full)
        t = times["pruned"] / times["full"]
        print(f"{share:>8.0%} {heads:>6d} {ratio:>13.3f} {t:>11.3f} {1 / t:>9.2f}")


def layer_rows(device: torch.device, rounds: int) -> None:
    print("\none MultiHeadAttention layer, half of the heads removed (forward)")
    print(f"{'size':>32} {'params ratio':>13} {'time ratio':>11} {'speed-up':>9}")
    for c in LAYERS:
        torch.manual_seed(0)
        full = MultiHeadAttention(c["d_model"], c["n_heads"]).to(device).eval()
        pruned = copy.deepcopy(full)
        pruned.prune_heads(range(c["n_heads"] // 2))
        x = torch.randn(c["batch"], c["seq"], c["d_model"], device=device)
        times = median_times(
            {"full": lambda f=full, x=x: f(x), "pruned": lambda p=pruned, x=x: p(x)}, rounds=rounds
        )
        ratio = sum(p.numel() for p in pruned.parameters()) / sum(
            p.numel() for p in full.parameters()
        )
        t = times["pruned"] / times["full"]
        size = f"b{c['batch']} n{c['seq']} d{c['d_model']} h{c['n_heads']}"
        print(f"{size:>32} {ratio:>13.3f} {t:>11.3f} {1 / t:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per variant")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"device: {device}, torch {torch.__version__}, threads: {torch.get_num_threads()}")
    model_rows(device, args.rounds)
    layer_rows(device, args.rounds)


if __name__ == "__main__":
    main()
