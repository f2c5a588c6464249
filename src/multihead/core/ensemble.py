"""K seeds of one model as one batched model (trained by ``core.ensemble_train``).

``stack_seeds(make, seeds)`` builds one model per seed exactly as a notebook builds it alone
(``torch.manual_seed(seed)``, then ``make(seed)``) and stacks every parameter along a leading
*seed* axis. ``SeedEnsemble.forward`` is the model's forward written once for that axis:
each matrix product is one batched product over the seeds (``bmm``), and attention folds
the seeds into the batch, so K small models cost about as many kernel calls as one. (A
``torch.vmap`` of the model would not: the fused attention kernel has no CPU batching rule,
and the model's data-dependent input checks cannot run under it.) ``pick(k)`` returns seed
``k`` as an ordinary model, on which hooks and ``run_with_cache`` work.

Dropout: each seed draws its masks from its own generator, in the order and shapes in which
the model alone draws them. ``stack_seeds`` starts that generator from the state torch's
global generator has right after the seed's model was built, which is where training alone
goes on drawing, so on the CPU the masks are those of the alone run, as long as every seed's
batch has the length it has alone: where ``stack_batches`` pads the seeds' batches to one
length (translation, tagging), a seed's masks have another shape than alone, so dropout
training is equal in distribution, not draw for draw. Models passed to
``SeedEnsemble`` directly get a generator seeded with their seed instead (same distribution,
other masks); on a GPU the alone run draws from the GPU's generator, so its masks differ too.
Hook points are not passed: hooks (DropHead, gates) do not act while the ensemble trains.

Shapes: every input and output carries the seed axis first, e.g. tokens (seeds, batch, seq)
-> logits (seeds, batch, seq, classes).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_bool_mask, check_callable, check_int
from multihead.core.attention import MultiHeadAttention, blocked
from multihead.core.hooks import HookPoint
from multihead.core.model import EncoderDecoder, EncoderModel, FeedForward, Layer, Stack
from multihead.core.model import check_tokens as check_token_ids
from multihead.core.talking_heads import TalkingHeadsAttention

Batch = tuple[Tensor, ...]
# fn(path, batch, n_heads, generators) -> (K, batch, heads) gates, or None for no gate
HeadGates = Callable[[str, int, int, list[torch.Generator]], Tensor | None]
MODELS = (EncoderModel, EncoderDecoder)
_PARTS = (*MODELS, Stack, Layer, FeedForward, MultiHeadAttention, HookPoint, nn.ModuleList)
_PARTS += (nn.Linear, nn.LayerNorm, nn.Embedding, nn.Dropout, nn.Identity)


def _check_models(models: object) -> list[nn.Module]:
    if isinstance(models, nn.Module) or not isinstance(models, Sequence):
        raise TypeError("models must be a list of models, one per seed (stack_seeds builds it)")
    models = list(models)
    if len(models) < 1:
        raise ValueError("models is empty: pass at least one model (K >= 1 seeds)")
    first = models[0]
    if type(first) not in MODELS:
        raise TypeError(
            f"models must hold EncoderModel or EncoderDecoder, got {type(first).__name__}"
        )
    for module in first.modules():
        if type(module) not in _PARTS and not isinstance(module, TalkingHeadsAttention):
            raise TypeError(f"models holds a {type(module).__name__}, which the ensemble lacks")
    shapes = {n: p.shape for n, p in first.named_parameters()}
    for i, m in enumerate(models[1:], start=1):
        if type(m) is not type(first) or m.cfg != first.cfg:
            raise ValueError(f"models[{i}] differs from models[0] in type or config; stack one")
        if {n: p.shape for n, p in m.named_parameters()} != shapes:
            raise ValueError(f"models[{i}] has other parameters than models[0] (pruned heads?)")
    return models


def _check_seeds(seeds: object, k: int | None = None) -> tuple[int, ...]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise TypeError(f"seeds must be a list of ints, got {type(seeds).__name__}")
    seeds = tuple(check_int(f"seeds[{i}]", s, 0) for i, s in enumerate(seeds))
    if not seeds:
        raise ValueError("seeds is empty: pass at least one seed (K >= 1)")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={list(seeds)} repeats a seed; each seed must be different")
    if k is not None and len(seeds) != k:
        raise ValueError(f"seeds has {len(seeds)} entries but there are {k} models")
    return seeds


class SeedEnsemble(nn.Module):
    """K copies of one architecture, one per seed, with every parameter and buffer stacked
    along a leading seed axis (named as in the model, with ``__`` for ``.``).

    Args:
        models: the K models, same type and ``cfg`` (``EncoderModel`` or ``EncoderDecoder``,
            plain or talking-heads attention).
        seeds: their seeds (K different non-negative ints).
        dropout_states: optional K CPU generator states for the dropout masks (default:
            generators seeded with ``seeds``).

    ``forward`` takes the model's inputs with a seed axis first. ``pick(k)`` and
    ``unstack()`` give ordinary models.

    Shapes: EncoderModel: tokens (K, batch, seq), key_padding_mask (K, batch, seq) ->
    (K, batch, seq, classes); EncoderDecoder: src (K, batch, S), tgt (K, batch, T),
    src/tgt_padding_mask like them -> (K, batch, T, classes).
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        seeds: Sequence[int],
        dropout_states: Sequence[Tensor] | None = None,
    ) -> None:
        super().__init__()
        models = _check_models(models)
        self.seeds = _check_seeds(seeds, len(models))
        self.n_seeds = len(models)
        self.cfg = models[0].cfg
        self._template = [copy.deepcopy(models[0]).cpu().eval()]  # a list: no submodule
        for name, _ in models[0].named_parameters():
            stacked = torch.stack([m.get_parameter(name).detach() for m in models])
            self.register_parameter(name.replace(".", "__"), nn.Parameter(stacked.clone()))
        for name, _ in models[0].named_buffers():
            stacked = torch.stack([m.get_buffer(name).detach() for m in models])
            self.register_buffer(name.replace(".", "__"), stacked.clone())
        if dropout_states is not None and len(dropout_states) != self.n_seeds:
            raise ValueError(f"dropout_states must hold {self.n_seeds} generator states")
        self.generators = []
        for i, seed in enumerate(self.seeds):
            g = torch.Generator().manual_seed(seed)
            if dropout_states is not None:
                g.set_state(dropout_states[i])
            self.generators.append(g)
        self.head_gates: HeadGates | None = None
        self._gates_fixed = False

    def set_head_gates(self, fn: HeadGates | None, *, fixed_per_step: bool = False) -> None:
        """Multiply each head's ``z`` by ``fn(path, batch, n_heads, generators)`` while the
        ensemble trains (``None`` from ``fn``, or ``fn=None``: no gate). ``path`` names the
        attention module as in the model, ``generators`` are the seeds' own generators.

        ``fixed_per_step=True`` promises that ``fn`` gives every row the same gates until the
        caller draws new ones between steps (Hard Concrete gates drawn once per step): then a
        batch may go through in several passes (``draws_at_random`` is False).

        Shapes: fn(...) -> (K, batch, heads) or None.
        """
        if fn is not None:
            check_callable("fn", fn, "fn(path, batch, n_heads, generators) -> (K, batch, heads)")
        if not isinstance(fixed_per_step, bool):
            raise TypeError(f"fixed_per_step must be True or False, got {fixed_per_step!r}")
        self.head_gates = fn
        self._gates_fixed = fixed_per_step

    @property
    def draws_at_random(self) -> bool:
        """Whether a training forward pass draws masks (dropout, attention dropout or head
        gates not fixed per step): then splitting a batch into several passes changes what is
        drawn.

        Shapes: none.
        """
        if not self.training:
            return False
        dropout = any(
            (isinstance(m, nn.Dropout) and m.p > 0)
            or (isinstance(m, MultiHeadAttention) and m.attn_dropout > 0)
            for m in self.template.modules()
        )
        return dropout or (self.head_gates is not None and not self._gates_fixed)

    def _gate(self, path: str, z: Tensor) -> Tensor:
        """Shapes: z (K, B, heads, Sq, d_value) -> the same, times the head gates."""
        if not self.training or self.head_gates is None:
            return z
        gates = self.head_gates(path, z.shape[1], z.shape[2], self.generators)
        if gates is None:
            return z
        if not isinstance(gates, Tensor) or gates.shape != z.shape[:3]:
            got = tuple(gates.shape) if isinstance(gates, Tensor) else type(gates).__name__
            want = tuple(z.shape[:3])  # (K, batch, heads)
            raise ValueError(f"the head gates of {path} must be shaped {want}, got {got}")
        return z * gates.to(device=z.device, dtype=z.dtype)[..., None, None]

    @property
    def template(self) -> nn.Module:
        """The untrained structure (a CPU copy of ``models[0]``); its weights are unused."""
        return self._template[0]

    def p(self, name: str) -> Tensor:
        """The stacked parameter or buffer ``name`` (a model path). Shapes: (K, *shape)."""
        return getattr(self, name.replace(".", "__"))

    @torch.no_grad()
    def pick(self, k: int) -> nn.Module:
        """Seed ``k`` as an ordinary model, in eval mode, on the ensemble's device.

        Shapes: none.
        """
        k = check_int("k", k, 0, self.n_seeds)
        model = copy.deepcopy(self.template)
        model.load_state_dict({n: t[k].clone() for n, t in self._stacked().items()})
        return model.to(next(self.parameters()).device).eval()

    def unstack(self) -> list[nn.Module]:
        """Every seed as an ordinary model: ``[pick(0), ..., pick(K - 1)]``. Shapes: none."""
        return [self.pick(k) for k in range(self.n_seeds)]

    def _stacked(self) -> dict[str, Tensor]:
        names = [n for n, _ in self.template.named_parameters()]
        names += [n for n, _ in self.template.named_buffers()]
        return {n: self.p(n) for n in names}

    def repeat(self, x: Tensor) -> Tensor:
        """The same input for every seed (a view). Shapes: (*S) -> (K, *S)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        return x.expand(self.n_seeds, *x.shape)

    # ------------------------------------------------------------------ forward pass
    def forward(self, *inputs: Tensor | None, **kwargs: Tensor | None) -> Tensor:
        """The model's forward for every seed at once (see the class docstring for shapes)."""
        if isinstance(self.template, EncoderModel):
            return self._encoder_model(*inputs, **kwargs)
        return self._encoder_decoder(*inputs, **kwargs)

    def _encoder_model(self, tokens: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        self._check_inputs("tokens", tokens, key_padding_mask, "key_padding_mask")
        x = self._stack("encoder", tokens, key_padding_mask)
        return self._linear("head", x)

    def _encoder_decoder(
        self,
        src: Tensor,
        tgt: Tensor,
        src_padding_mask: Tensor | None = None,
        tgt_padding_mask: Tensor | None = None,
    ) -> Tensor:
        self._check_inputs("src", src, src_padding_mask, "src_padding_mask")
        self._check_inputs("tgt", tgt, tgt_padding_mask, "tgt_padding_mask")
        if tgt.shape[1] != src.shape[1]:
            raise ValueError(f"src and tgt hold {src.shape[1]} and {tgt.shape[1]} examples")
        memory = self._stack("encoder", src, src_padding_mask)
        x = self._stack("decoder", tgt, tgt_padding_mask, True, memory, src_padding_mask)
        return self._linear("head", x)

    def _check_inputs(self, name: str, tokens: object, mask: object, mask_name: str) -> None:
        # Checked here, once for all seeds: the model's own checks see one seed at a time.
        stack = self.template.encoder if name != "tgt" else self.template.decoder
        if not isinstance(tokens, Tensor) or tokens.ndim != 3 or len(tokens) != self.n_seeds:
            got = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"{name} must be shaped ({self.n_seeds} seeds, batch, seq), got {got}")
        check_token_ids(name, tokens.flatten(0, 1), stack.vocab_size, stack.max_len)
        if mask is not None:
            check_bool_mask(mask_name, mask, tuple(tokens.shape), "True at padding")
            if mask.all(dim=-1).any():
                raise ValueError(f"{mask_name} masks every key of some example")

    def _stack(self, prefix: str, tokens: Tensor, kpm, causal=False, memory=None, mem_kpm=None):
        K, B, S = tokens.shape
        embed = self.p(f"{prefix}.embed.weight")  # (K, vocab, d_model)
        offset = torch.arange(K, device=tokens.device)[:, None, None] * embed.shape[1]
        x = F.embedding(tokens + offset, embed.flatten(0, 1))  # (K, B, S, d_model)
        x = x + self.p(f"{prefix}.pos.weight")[:, None, :S]  # positions (K, 1, S, d_model)
        stack = self.template.get_submodule(prefix)
        for i, layer in enumerate(stack.layers):
            path = f"{prefix}.layers.{i}"
            x = self._layer(path, layer, x, kpm, causal, memory, mem_kpm)
        if isinstance(stack.norm, nn.LayerNorm):
            x = self._norm(f"{prefix}.norm", x)
        return x

    def _layer(self, path, layer: Layer, x, kpm, causal, memory, mem_kpm) -> Tensor:
        p_drop = layer.drop.p

        def sub(x: Tensor, norm: str, f: Callable[[Tensor], Tensor]) -> Tensor:
            if layer.pre:
                return x + self._dropout(f(self._norm(f"{path}.{norm}", x)), p_drop)
            return self._norm(f"{path}.{norm}", x + self._dropout(f(x), p_drop))

        x = sub(x, "norms.0", lambda y: self._attention(f"{path}.attn", y, None, kpm, causal))
        if layer.cross_attn is not None:
            x = sub(
                x, "norms.2", lambda y: self._attention(f"{path}.cross_attn", y, memory, mem_kpm)
            )
        return sub(x, "norms.1", lambda y: self._mlp(f"{path}.mlp", layer.mlp, y))

    def _mlp(self, path: str, mlp: FeedForward, x: Tensor) -> Tensor:
        h = F.gelu(self._linear(f"{path}.fc1", x))  # (K, B, S, d_ff)
        return self._linear(f"{path}.fc2", self._dropout(h, mlp.drop.p))

    def _attention(self, path, x: Tensor, memory, kpm, causal: bool = False) -> Tensor:
        """Shapes: x (K, B, Sq, d_model), memory (K, B, Sk, d_model) or None -> like x."""
        attn: MultiHeadAttention = self.template.get_submodule(path)
        K, B, Sq, _ = x.shape
        w = {n: self.p(f"{path}.{n}") if getattr(attn, n) is not None else None for n in _QKV}
        Q, Kw, V = (w["W_Q"], w["b_Q"]), (w["W_K"], w["b_K"]), (w["W_V"], w["b_V"])
        if memory is None:
            q, k, v = _project(x, Q, Kw, V)
        else:
            (q,), (k, v) = _project(x, Q), _project(memory, Kw, V)
        # q, k, v: (K * B, heads, len, d_head), the seeds folded into the batch
        mask = None if kpm is None else kpm.flatten(0, 1)  # (K * B, Sk), True at padding
        mask = blocked(mask, causal, Sq, k.shape[2], x.device)
        p_drop = attn.attn_dropout if self.training else 0.0
        if isinstance(attn, TalkingHeadsAttention):
            z = self._talking(path, attn, q, k, v, mask)
        elif p_drop:  # explicit path, so that each seed draws its own pattern dropout
            scores = (q / math.sqrt(attn.d_key)) @ k.transpose(-2, -1)  # (K*B, h, Sq, Sk)
            scores = scores if mask is None else scores.masked_fill(mask, float("-inf"))
            z = self._dropout(scores.softmax(-1).unflatten(0, (K, B)), p_drop).flatten(0, 1) @ v
        else:
            z = F.scaled_dot_product_attention(q, k, v, None if mask is None else ~mask)
        z = self._gate(path, z.unflatten(0, (K, B)))  # (K, B, heads, Sq, d_value)
        z = z * self.p(f"{path}.head_mask")[:, None, :, None, None]
        z = z.transpose(2, 3).reshape(K, B * Sq, -1)  # (K, B * Sq, heads * d_value)
        W_O = self.p(f"{path}.W_O").flatten(1, 2)  # (K, heads * d_value, d_model)
        out = z @ W_O if w["b_O"] is None else torch.baddbmm(w["b_O"][:, None], z, W_O)
        return out.view(K, B, Sq, -1)

    def _talking(self, path, attn: TalkingHeadsAttention, q, k, v, mask) -> Tensor:
        K = self.n_seeds
        scores = (q / math.sqrt(attn.d_key)) @ k.transpose(-2, -1)  # (K*B, h_k, Sq, Sk)
        logits = scores.unflatten(0, (K, -1))  # (K, B, h_k, Sq, Sk)
        if attn.P_l is not None:
            logits = torch.einsum("kbiqs,kij->kbjqs", logits, self.p(f"{path}.P_l"))
        logits = logits.flatten(0, 1)
        if mask is not None:
            logits = logits.masked_fill(mask, float("-inf"))
        mixed = logits.softmax(dim=-1).unflatten(0, (K, -1))  # (K, B, h, Sq, Sk)
        if attn.P_w is not None:
            mixed = torch.einsum("kbjqs,kjm->kbmqs", mixed, self.p(f"{path}.P_w"))
        return mixed.flatten(0, 1) @ v  # (K*B, h_v, Sq, d_value)

    def _linear(self, path: str, x: Tensor) -> Tensor:
        """An ``nn.Linear`` per seed. Shapes: x (K, ..., in) -> (K, ..., out)."""
        W, b = self.p(f"{path}.weight"), self.p(f"{path}.bias")  # (K, out, in), (K, out)
        y = torch.baddbmm(b[:, None], x.flatten(1, -2), W.transpose(1, 2))
        return y.view(*x.shape[:-1], -1)

    def _norm(self, path: str, x: Tensor) -> Tensor:
        norm: nn.LayerNorm = self.template.get_submodule(path)
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (-1,)  # (K, 1, ..., d_model)
        y = F.layer_norm(x, norm.normalized_shape, eps=norm.eps)
        return y * self.p(f"{path}.weight").view(shape) + self.p(f"{path}.bias").view(shape)

    def _dropout(self, x: Tensor, p: float) -> Tensor:
        """Dropout with each seed's masks from its own generator, drawn as ``F.dropout``
        draws them for one seed. Shapes: x (K, ...) -> the same."""
        if not self.training or p == 0:
            return x
        noise = [
            torch.empty(x.shape[1:], dtype=x.dtype).bernoulli_(1 - p, generator=g)
            for g in self.generators
        ]
        return x * torch.stack(noise).div_(1 - p).to(x.device)


_QKV = ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "b_O")


def _project(x: Tensor, *weights: tuple[Tensor, Tensor | None]) -> list[Tensor]:
    """Every head of one or more stacked projections of ``x`` in one batched product.

    Shapes: x (K, B, S, d_model), each W (K, heads, d_model, d_head), b (K, heads, d_head)
    -> one (K * B, heads, S, d_head) tensor per projection.
    """
    K, B, S, d = x.shape
    flat = torch.cat([W.permute(0, 2, 1, 3).reshape(K, d, -1) for W, _ in weights], dim=2)
    x = x.reshape(K, B * S, d)
    if all(b is not None for _, b in weights):
        bias = torch.cat([b.flatten(1) for _, b in weights], dim=1)  # (K, sum heads * d_head)
        y = torch.baddbmm(bias[:, None], x, flat)  # (K, B * S, sum heads * d_head)
    else:
        y = x @ flat
    parts = y.split([W.shape[1] * W.shape[3] for W, _ in weights], dim=-1)
    return [
        part.view(K * B, S, W.shape[1], W.shape[3]).transpose(1, 2)  # (K*B, heads, S, d_head)
        for (W, _), part in zip(weights, parts, strict=True)
    ]


def stack_seeds(make: Callable[[int], nn.Module], seeds: Sequence[int]) -> SeedEnsemble:
    """Build ``make(seed)`` after ``torch.manual_seed(seed)`` for every seed (the init each
    model gets when a notebook builds it alone) and stack the models.

    The state of torch's global generator right after each build starts that seed's dropout
    generator, as training alone would go on drawing from it.

    Shapes: none.
    """
    check_callable("make", make, "make(seed) -> EncoderModel or EncoderDecoder")
    seeds = _check_seeds(seeds)
    models, states = [], []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(make(seed))
        states.append(torch.get_rng_state())
    return SeedEnsemble(models, seeds, dropout_states=states)
