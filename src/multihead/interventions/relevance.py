"""Layer-wise relevance propagation (LRP) through the course's Transformers, computed as a
modified gradient, and the head relevance of Voita et al. (2019).

LRP (Bach et al. 2015) splits an output value ``f`` over the units of every layer. For the
models of ``multihead.core.model`` each rule below is a change to the *backward* pass only
(the forward values stay the same), after which the relevance of any tensor ``h`` is
``h * df~/dh``, the gradient times input of the modified network ``f~``:

* attention: the pattern is a constant (detached), so relevance flows through the values
  ``z = P v`` and never into the queries or keys;
* layer norm: its standard deviation is a constant, so ``gamma (x - mean) / sigma + beta``
  is affine in ``x``;
* GELU: ``gelu(a) = a Phi(a)`` with the gate ``Phi(a)`` a constant, so relevance passes
  the nonlinearity unchanged;
* every linear map (``nn.Linear``, the value projection ``v`` and the output projection
  ``W_O``): the epsilon-rule, the z-rule with ``z + eps sign(z)`` in the denominator; the
  part ``eps sign(z) / (z + eps sign(z))`` of the relevance is *absorbed* (kept out of the
  layers below);
* sums (residual connections, token + position embeddings): the z-rule, relevance split in
  proportion to the summands (plain gradient times input does exactly that).

The chapter on head roles derives the rules and proves that relevance is conserved: over
any cut of the network it adds up to ``f`` minus what the biases and the epsilon
stabilisers below the output and above the cut take. ``relevance`` returns those parts
too, so that the books can be balanced.

Nothing here knows a task: ``forward(model, batch)`` runs the model and
``explained(output, batch)`` picks the values to explain (e.g. the top logit at every
target token), as in ``multihead.interventions.pruning``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from multihead._checks import check_bool, check_callable, check_number
from multihead.core.attention import MultiHeadAttention
from multihead.core.hooks import hooks
from multihead.core.model import EncoderDecoder, FeedForward
from multihead.interventions.ablation import attention_modules_of

Batch = tuple[Tensor, ...]
BIASES = ("bias", "b_Q", "b_K", "b_V", "b_O")  # parameter names that are added, not multiplied
Forward = Callable[[nn.Module, Batch], Tensor]
Explained = Callable[[Tensor, Batch], Tensor]


def top_logits(logits: Tensor, keep: Tensor) -> Tensor:
    """The largest logit (the predicted token's) at every kept position, as Voita et al.
    explain the top-1 prediction.

    Shapes: logits (batch, seq, vocab), keep (batch, seq) bool, True = explained -> (n,).
    """
    if not isinstance(logits, Tensor) or logits.ndim != 3:
        raise ValueError("logits must be a (batch, seq, vocab) tensor")
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool or keep.shape != logits.shape[:2]:
        raise ValueError(f"keep must be a bool tensor of shape {tuple(logits.shape[:2])}")
    return logits.amax(-1)[keep]


def _epsilon(z: Tensor, eps: float, leaves: list[tuple[str, Tensor]], name: str) -> Tensor:
    """The epsilon-rule on the output ``z`` of a linear map: the same value, but only the
    share ``z / (z + eps sign z)`` of the gradient reaches ``z``; the rest of the relevance
    goes to a constant leaf (recorded in ``leaves``)."""
    if eps == 0.0:
        return z
    sign = torch.where(z >= 0, 1.0, -1.0)
    share = (z / (z + eps * sign)).detach()
    absorbed = ((1.0 - share) * z).detach().requires_grad_(True)
    leaves.append((name, absorbed))
    return share * z + absorbed


def _layer_norm(module: nn.LayerNorm, x: Tensor) -> Tensor:
    """``module(x)`` with the standard deviation held constant (affine in ``x``)."""
    centred = x - x.mean(-1, keepdim=True)
    sigma = (centred.pow(2).mean(-1, keepdim=True) + module.eps).sqrt().detach()
    y = centred / sigma
    if module.weight is not None:
        y = y * module.weight
    return y if module.bias is None else y + module.bias


def _gated_mlp(module: FeedForward, x: Tensor) -> Tensor:
    """``module(x)`` in eval mode with GELU as a gate: ``a * Phi(a)``, ``Phi`` constant."""
    a = module.fc1(x)  # (..., d_ff); fc1's own hook applies the epsilon-rule
    gate = 0.5 * (1.0 + torch.erf(a / 2**0.5))  # Phi(a): exact GELU is a * Phi(a)
    return module.fc2(a * gate.detach())


@contextmanager
def lrp_rules(model: nn.Module, eps: float = 0.0) -> Iterator[list[tuple[str, Tensor]]]:
    """Attach the LRP rules (module docstring) to ``model`` for the body of a ``with`` block;
    yields the list that collects ``(module path, absorbed leaf)`` of the epsilon-rule.

    The model must be in eval mode (dropout off): the gated MLP recomputes the MLP without
    dropout. The forward values are unchanged (up to roundoff).

    Shapes: none.
    """
    modules = attention_modules_of(model)
    eps = check_number("eps", eps, 0.0, None)
    if model.training:
        raise ValueError("model must be in eval mode (model.eval()) for the LRP rules")
    leaves: list[tuple[str, Tensor]] = []
    names = {m: path for path, m in model.named_modules()}

    def replace(rule):
        return lambda module, args, output: rule(module, args[0] if args else None, output)

    rules = {
        nn.LayerNorm: lambda m, x, out: _layer_norm(m, x),
        FeedForward: lambda m, x, out: _gated_mlp(m, x),
        nn.Linear: lambda m, x, out: _epsilon(out, eps, leaves, names[m]),
        MultiHeadAttention: lambda m, x, out: _epsilon(out, eps, leaves, names[m]),
    }
    point_hooks = [
        (lambda p: p.rpartition(".")[0] in modules and p.endswith(".pattern"),
         lambda t, _p: t.detach()),
        (lambda p: p.rpartition(".")[0] in modules and p.endswith(".v"),
         lambda t, p: _epsilon(t, eps, leaves, p)),
    ]  # fmt: skip
    with ExitStack() as stack:
        for m in model.modules():
            rule = next((r for kind, r in rules.items() if isinstance(m, kind)), None)
            if rule is not None:
                stack.callback(m.register_forward_hook(replace(rule)).remove)
        stack.enter_context(hooks(model, point_hooks))
        yield leaves


@dataclass
class Relevance:
    """What ``relevance`` found for one batch.

    ``output``: the explained value ``f`` (the sum of ``explained``); ``at``: the relevance
    of every element of each captured module output (same shape as that output);
    ``bias``: the relevance taken by each bias parameter (and layer-norm shift);
    ``absorbed``: the relevance absorbed by the epsilon-rule, summed per module path;
    ``count``: how many values were explained.

    Shapes: at {path: like the module's output}; bias, absorbed {name: float}.
    """

    output: float
    count: int
    at: dict[str, Tensor] = field(default_factory=dict)
    bias: dict[str, float] = field(default_factory=dict)
    absorbed: dict[str, float] = field(default_factory=dict)


def relevance(
    model: nn.Module,
    batch: Batch,
    forward: Forward,
    explained: Explained,
    *,
    eps: float = 0.0,
    capture: Sequence[str] = (),
    rules: bool = True,
) -> Relevance:
    """LRP of the values ``explained(forward(model, batch), batch)`` (summed) down to the
    outputs of the modules at ``capture`` (module paths, e.g. ``"encoder.layers.0"`` or
    ``"encoder.layers.0.attn.z"``).

    A captured module must run once per forward. The model is put in eval mode for the call
    and restored afterwards; its weights do not change. ``rules=False`` leaves the rules out:
    plain gradient times input, which does not conserve relevance (for comparison).

    Shapes: explained -> (n,); -> Relevance.
    """
    attention_modules_of(model)
    check_callable("forward", forward, "forward(model, batch) -> output")
    check_callable("explained", explained, "explained(output, batch) -> (n,) values")
    check_bool("rules", rules)
    if isinstance(capture, str) or not all(isinstance(p, str) for p in capture):
        raise TypeError("capture must be a sequence of module paths (strings)")
    known = dict(model.named_modules())
    unknown = [p for p in capture if p not in known]
    if unknown:
        raise ValueError(f"capture names {unknown}, which are not modules of model")
    was_training = model.training
    model.eval()
    seen: dict[str, Tensor] = {}

    def keep(path: str):
        def hook(_module, _args, output: Tensor) -> None:
            if path in seen:
                raise ValueError(f"capture: {path!r} ran twice in one forward; capture it once")
            seen[path] = output

        return hook

    try:
        with ExitStack() as stack, torch.enable_grad():
            leaves = stack.enter_context(lrp_rules(model, eps)) if rules else []
            for path in capture:  # after the rules, so that the rules' outputs are captured
                stack.callback(known[path].register_forward_hook(keep(path)).remove)
            values = explained(forward(model, batch), batch)
            if not isinstance(values, Tensor) or values.ndim != 1:
                raise ValueError("explained must return a 1-D tensor: one value per token")
            biases = [
                (n, p)
                for n, p in model.named_parameters()
                if n.rpartition(".")[2] in BIASES and p.requires_grad
            ]
            inputs = [seen[p] for p in capture] + [p for _, p in biases] + [t for _, t in leaves]
            grads = torch.autograd.grad(values.sum(), inputs, allow_unused=True)
    finally:
        model.train(was_training)

    def times(x: Tensor, g: Tensor | None) -> Tensor:
        return torch.zeros_like(x) if g is None else (x * g).detach()

    k, b = len(capture), len(biases)
    out = Relevance(output=float(values.sum().detach()), count=len(values))
    out.at = {p: times(seen[p], g) for p, g in zip(capture, grads[:k], strict=True)}
    out.bias = {
        n: float(times(p, g).sum()) for (n, p), g in zip(biases, grads[k : k + b], strict=True)
    }
    for (name, leaf), g in zip(leaves, grads[k + b :], strict=True):
        out.absorbed[name] = out.absorbed.get(name, 0.0) + float(times(leaf, g).sum())
    return out


def head_relevance(
    model: nn.Module,
    batches: Iterable[Batch],
    forward: Forward,
    explained: Explained,
    *,
    eps: float = 0.0,
    normalize: bool = True,
) -> dict[str, Tensor]:
    """Voita et al.'s relevance of every head: the LRP relevance of the head's output ``z_h``
    (summed over its positions and value dimensions), per explained value, averaged over all
    the values of ``batches``. With ``normalize`` each module's relevances are divided by
    the sum of their absolute values, so that the heads of a layer share 1 (as Voita et al.
    report them; where a head's relevance is negative, its share is too).

    Shapes: explained -> (n,); -> {module path: (heads,)}.
    """
    modules = attention_modules_of(model)
    check_bool("normalize", normalize)
    totals = {name: torch.zeros(m.n_heads, dtype=torch.float64) for name, m in modules.items()}
    count = 0
    for batch in batches:
        r = relevance(
            model, batch, forward, explained, eps=eps, capture=[f"{n}.z" for n in modules]
        )
        count += r.count
        for name in modules:
            totals[name] += r.at[f"{name}.z"].sum(dim=(0, 2, 3)).double().cpu()  # (heads,)
    if count == 0:
        raise ValueError("batches explained nothing; pass at least one batch with a value")
    scores = {name: (t / count).float() for name, t in totals.items()}
    if normalize:
        scores = {name: s / s.abs().sum().clamp_min(1e-20) for name, s in scores.items()}
    return scores


Cut = tuple[list[str], Callable[[str], bool]]


def encoder_decoder_cuts(model: EncoderDecoder) -> dict[str, Cut]:
    """Cuts of an encoder-decoder, for checking the conservation of relevance: the four
    embedding outputs; after encoder layer ``l``, the encoder's stream there with the
    decoder's embeddings; and the logits. Each cut is (the module paths whose outputs form
    it, a test of whether a bias or stabiliser, by its name in ``Relevance``, lies above it).

    Shapes: none.
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    decoder = ["decoder.embed", "decoder.pos"]
    cuts: dict[str, Cut] = {
        "embeddings": (["encoder.embed", "encoder.pos", *decoder], lambda name: True)
    }

    def above_layer(layer: int) -> Callable[[str], bool]:
        def above(name: str) -> bool:
            if name.startswith("encoder.layers."):
                return int(name.split(".")[2]) > layer
            return True  # the final encoder norm, the decoder and the read-out

        return above

    for i in range(len(model.encoder.layers)):
        cuts[f"after encoder layer {i}"] = ([f"encoder.layers.{i}", *decoder], above_layer(i))
    cuts["logits"] = (["head"], lambda name: False)  # the read-out's bias lies below its output
    return cuts


def conservation(r: Relevance, cuts: dict[str, Cut]) -> dict[str, tuple[float, float]]:
    """For each cut: (the relevance on it, the relevance that the biases and stabilisers
    above it take). By the conservation proposition the two add up to ``r.output``.

    The modules of every cut must have been captured by ``relevance``.

    Shapes: none.
    """
    if not isinstance(r, Relevance):
        raise TypeError(f"r must be a Relevance (from relevance()), got {type(r).__name__}")
    taken = {**r.bias, **r.absorbed}
    out = {}
    for name, (paths, above) in cuts.items():
        missing = [p for p in paths if p not in r.at]
        if missing:
            raise ValueError(f"cut {name!r} needs {missing}; pass them to relevance(capture=...)")
        on = sum(float(r.at[p].sum()) for p in paths)
        out[name] = (on, sum(v for n, v in taken.items() if above(n)))
    return out
