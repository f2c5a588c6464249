"""The role figures draw, and reject malformed input."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from multihead.viz.roles import ROLE_COLORS, pattern_with_targets, role_grid  # noqa: E402


def test_role_grid_draws_every_role():
    roles = [["positional", "self", "none"], ["syntactic", "rare-word", "delimiter"]]
    ax = role_grid(roles, [["-1", "+0", ""], ["nsubj", "", ""]])
    assert len(ax.get_legend().get_texts()) == len(ROLE_COLORS)
    plt.close(ax.figure)


def test_role_grid_rejects_unknown_roles_and_bad_labels():
    with pytest.raises(ValueError, match="roles"):
        role_grid([["boss"]])
    with pytest.raises(ValueError, match="labels"):
        role_grid([["none", "none"]], [["a"]])


def test_pattern_with_targets_outlines_targets():
    p = torch.eye(5)
    targets = torch.zeros(5, 5, dtype=torch.bool)
    targets[1, 0] = targets[2, 1] = True
    ax = pattern_with_targets(p, list("abcd"), targets, "demo")
    assert len(ax.patches) == 2 and ax.get_title() == "demo"
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="covering"):
        pattern_with_targets(torch.eye(3), list("abcd"))
