"""Comparing trained models in tests (``from support.models import same_weights``)."""

import torch


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two models hold the same parameters and buffers, bit for bit."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[n].cpu(), sb[n].cpu()) for n in sa)
