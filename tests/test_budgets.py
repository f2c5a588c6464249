"""The package's size budgets (DESIGN section 2): the model core a student reads (both model
families: the attention kernel and layers, the cache, hooks, configs, positions, the encoder
and decoder models) stays within 1,700 lines, and every module stays readable top to bottom,
450 lines at most."""

from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "multihead"
CORE_READING_PATH = (
    "attention", "latent", "cache", "hooks", "config", "positions", "rotary", "model", "decoder"
)  # fmt: skip
CORE_BUDGET = 1_700
MODULE_BUDGET = 450


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_model_core_a_student_reads_stays_within_its_budget():
    sizes = {name: _lines(PKG / "core" / f"{name}.py") for name in CORE_READING_PATH}
    assert sum(sizes.values()) <= CORE_BUDGET, (
        f"core/{{{','.join(CORE_READING_PATH)}}}.py hold {sum(sizes.values())} lines "
        f"({sizes}); the budget is {CORE_BUDGET}"
    )


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_every_module_stays_within_the_module_budget(path):
    n = _lines(path)
    assert n <= MODULE_BUDGET, (
        f"{path.relative_to(PKG)} has {n} lines; split it below {MODULE_BUDGET}"
    )
