"""The decoders of notebooks 10 and 11 stay bit for bit what they were: the same parameters
from the same seed (state dict) and the same logits, in float32 and float64, one thread.

``tests/support/decoder_fingerprints.json`` holds SHA-256 digests taken before the decoder
gained its Llama-family settings; ``python -m tests.test_decoder_defaults`` rewrites it (do
that only for a change meant to alter these models, and say so in the commit).
"""

import hashlib
import json
from pathlib import Path

import pytest
import torch

from multihead.core.decoder import Decoder

FILE = Path(__file__).parent / "support" / "decoder_fingerprints.json"
CIRCUITS = {"mlp": False, "norm": False}
# name -> (vocab_size, max_len, d_model, n_layers, n_heads, keyword arguments), as built there
# when the digests were taken (notebook 10's recall decoders have since grown to width 64 with
# heads of size 8: these shapes still pin the decoder's code)
BUILDS = {
    "nb10 grouped-query": (20, 16, 24, 2, 4, {"n_kv_heads": 2}),
    "nb10 latent": (20, 16, 24, 2, 4, {"d_latent": 8}),
    "nb10 timing": (64, 256, 64, 2, 8, {}),
    **{
        f"nb10 recall {kv}": (40, 16, 32, 2, 8, {"d_head": 4, "d_ff": 64, "n_kv_heads": kv})
        for kv in (8, 4, 2, 1)
    },
    "nb10 recall MLA": (40, 16, 32, 2, 8, {"d_head": 4, "d_ff": 64, "d_latent": 16}),
    "nb11 circuits": (12, 8, 16, 1, 2, {"positions": "none", **CIRCUITS}),
    "nb11 by hand": (10, 8, 38, 2, 1, {"d_head": 10, **CIRCUITS}),
    **{
        f"nb11 {positions} {n}": (32, 24, 64, n, 4, {"positions": positions, **CIRCUITS})
        for positions in ("learned", "sinusoidal", "rotary", "none")
        for n in (1, 2)
    },
    "nb11 full block rotary": (32, 24, 64, 2, 4, {"positions": "rotary"}),
}


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for name, t in tensors:
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def fingerprints() -> dict[str, dict[str, str]]:
    """{build: {"state": digest, "float32": digest of logits, "float64": ...}}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for i, (name, (vocab, max_len, *sizes, kw)) in enumerate(BUILDS.items()):
            torch.manual_seed(i)
            model = Decoder(vocab, max_len, *sizes, **kw).eval()
            tokens = torch.randint(vocab, (3, max_len), generator=torch.Generator().manual_seed(i))
            entry = {"state": _digest(model.state_dict().items())}
            with torch.no_grad():
                entry["float32"] = _digest([("logits", model(tokens))])
                entry["float64"] = _digest([("logits", model.double()(tokens))])
            out[name] = entry
        return out
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def now():
    return fingerprints()


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_course_decoders_are_bitwise_unchanged(name, now):
    before = json.loads(FILE.read_text())
    assert now[name] == before[name], f"{name}: parameters or logits changed"


if __name__ == "__main__":
    FILE.write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
