"""The rare-word head of Voita et al. (2019) on a pretrained encoder, scored so that the
tokenizer cannot fake it.

Two artefacts are easy to fall into. Rarity taken from the sentences themselves (counts,
ties broken by WordPiece pieces) picks the words the tokenizer splits; and attention *to*
a word summed over its pieces favours a word with many pieces, since a head that spreads
its weight evenly gives a three-piece word three times the weight of a one-piece word.

Here rarity comes from a real frequency list (``wordfreq``'s Zipf values: log10 of the
frequency per billion words), and the criterion is scored at the token level: a query token
(not ``[SEP]``, not a piece of the target word itself) hits when its largest weight is on a
piece of the target word. A head choosing a key uniformly at random scores
``pieces(target) / tokens`` (``chance``). The test uses only sentences whose rarest word is
a single piece, so the rarest word and its control (another one-piece content word of the
same sentence) have the same number of pieces and the same chance level.

Inputs are the :class:`multihead.pretrained.load.SentenceAttention` records of
``attention_maps``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from multihead.analysis.metrics import argmax_credit
from multihead.pretrained.load import SentenceAttention, check_maps


def word_zipf(maps: list[SentenceAttention], lang: str = "en") -> list[list[float]]:
    """The Zipf frequency of every word (``wordfreq.zipf_frequency``, lower = rarer);
    ``math.inf`` for ``[CLS]``, ``[SEP]`` and words without a letter or digit, so that they
    are never the rarest word. A word missing from the list gets 0 (rarer than any listed).

    Shapes: n sentences -> n lists of len(words) floats.
    """
    maps = check_maps(maps)
    if not isinstance(lang, str) or not lang:
        raise ValueError(f"lang must be a language code such as 'en', got {lang!r}")
    try:
        from wordfreq import zipf_frequency
    except ImportError as err:
        raise ValueError(
            "word_zipf needs the wordfreq package: pip install wordfreq (or multihead[pretrained])"
        ) from err
    out = []
    for m in maps:
        inner = [
            zipf_frequency(w.lower(), lang) if any(c.isalnum() for c in w) else math.inf
            for w in m.words[1:-1]
        ]
        out.append([math.inf, *inner, math.inf])
    return out


def pieces_per_word(m: SentenceAttention) -> Tensor:
    """How many tokens each word of one sentence has. Shapes: -> (words,) int."""
    return torch.bincount(m.word_of_token, minlength=len(m.words))


def rare_word_targets(
    maps: list[SentenceAttention], zipf: list[list[float]]
) -> list[tuple[int, list[int]] | None]:
    """For each sentence, the rarest word and its controls, or ``None`` when the sentence
    cannot be used: its rarest word (lowest Zipf value, a unique minimum) must be a single
    piece, and the controls are the sentence's other one-piece content words (at least one).

    Shapes: n sentences -> n entries (rarest word index, list of control word indices).
    """
    maps = check_maps(maps)
    if len(zipf) != len(maps) or any(
        len(z) != len(m.words) for z, m in zip(zipf, maps, strict=True)
    ):
        raise ValueError("zipf must have one value per word of every sentence (word_zipf(maps))")
    out: list[tuple[int, list[int]] | None] = []
    for m, z in zip(maps, zipf, strict=True):
        pieces = pieces_per_word(m)
        content = [j for j, v in enumerate(z) if math.isfinite(v)]
        if not content:
            out.append(None)
            continue
        low = min(z[j] for j in content)
        rarest = [j for j in content if z[j] == low]
        controls = [j for j in content if j not in rarest and pieces[j] == 1]
        if len(rarest) != 1 or pieces[rarest[0]] != 1 or not controls:
            out.append(None)
        else:
            out.append((rarest[0], controls))
    return out


def token_hit_rate(
    maps: list[SentenceAttention], targets: list[list[int] | None]
) -> tuple[Tensor, float, float]:
    """How often a head's largest weight (token level, ties shared) lands on a piece of the
    target word. ``targets[i]`` lists alternative target words of sentence ``i`` (the rate
    is averaged over them, as if one were drawn at random), or is ``None`` to skip it.
    Queries: every token but ``[SEP]`` and the target's own pieces.

    Returns ``(rate, chance, best_offset)``: the pooled rate of every head; the rate of a
    head that picks a key uniformly at random; the best rate of a fixed relative offset
    (-3..3) that ignores the words.

    Shapes: -> rate (layers, heads), floats.
    """
    maps = check_maps(maps)
    if not isinstance(targets, (list, tuple)) or len(targets) != len(maps):
        raise ValueError(f"targets must be a list of {len(maps)} entries (one per sentence)")
    hits, count, chance_sum = 0.0, 0.0, 0.0
    offsets = range(-3, 4)
    offset_hits = dict.fromkeys(offsets, 0.0)
    for i, (m, alts) in enumerate(zip(maps, targets, strict=True)):
        if alts is None:
            continue
        if not alts or any(not 0 < j < len(m.words) - 1 for j in alts):
            raise ValueError(f"targets[{i}] must list words of sentence {i} (not [CLS]/[SEP])")
        t = m.token_attention.shape[-1]
        share = 1.0 / len(alts)
        for j in alts:
            target = m.word_of_token == j  # (tokens,)
            queries = ~target
            queries[-1] = False  # [SEP]
            credit = argmax_credit(m.token_attention, target)  # (layers, heads, tokens)
            hits = hits + share * credit[..., queries].sum(-1)
            n_q = int(queries.sum())
            count += share * n_q
            chance_sum += share * n_q * int(target.sum()) / t
            idx = torch.arange(t)
            for o in offsets:
                key = idx + o
                ok = queries & (key >= 0) & (key < t)
                offset_hits[o] += share * float(target[key[ok]].sum())
    if count == 0:
        raise ValueError("no sentence has a usable target (every entry of targets is None)")
    return hits / count, chance_sum / count, max(offset_hits.values()) / count
