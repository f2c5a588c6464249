"""A stand-in accelerator, to test on a CPU-only machine that work follows ``device()``.

Inside ``FakeAccelerator()``, ``runtime.device()`` returns the ``meta`` device, and a tensor
moved there (or created there) becomes an ``OnFake`` tensor: it reports ``device='meta'``
but keeps its values on the CPU and computes for real, so training gives the same numbers
as on the CPU. What a GPU would refuse is recorded in ``mixed`` (an op mixing an ``OnFake``
tensor with a CPU tensor that has elements) or raises (``.numpy()`` without ``.cpu()``);
``float64`` records the ops that make a float64 tensor on the device, which MPS refuses.

    with FakeAccelerator() as fake:
        model = EncoderModel(cfg)
        train(model, task.sample, tcfg)            # trains on device()
    assert not fake.mixed, fake.mixed              # nothing was left on the CPU

``python tests/support/fake_device.py notebooks/NN_name.ipynb`` runs a whole notebook
(fast mode) this way and names the cells that mixed devices. Only for tests: every op goes
through Python, so training runs tens of times slower (a notebook that trains takes many
minutes); the test-suite runs the training and scoring helpers this way, not the notebooks.
"""

from __future__ import annotations

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

FAKE = torch.device("meta")
_TO_COPY = torch.ops.aten._to_copy.default
_ALLOWED_MIXED = {torch.ops.aten.copy_.default}  # x.copy_(y) moves data, like x.to()


class OnFake(torch.Tensor):
    """A CPU tensor that reports the fake accelerator's device (see the module)."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            device=FAKE,
            requires_grad=elem.requires_grad,
        )
        out.elem = elem
        return out

    def __repr__(self) -> str:
        return f"OnFake({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("OnFake tensors work only inside FakeAccelerator()")


def _is_fake(device: object) -> bool:
    return device is not None and torch.device(device).type == FAKE.type


class FakeAccelerator(TorchDispatchMode):
    """The context manager of the module docstring; ``mixed`` lists the offending ops."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed: list[str] = []
        self.float64: list[str] = []
        self._patched: list[tuple[object, str, object]] = []

    def __enter__(self):
        from multihead.core import runtime

        real = runtime.device

        def fake_device(prefer: str | None = None) -> torch.device:
            return FAKE if prefer is None else real(prefer)

        # modules that imported `device` by name (``from ... import device as d``) see it too
        for module in [runtime, *list(sys.modules.values())]:
            for name, value in list(getattr(module, "__dict__", {}).items()):
                if value is real:
                    self._patched.append((module, name, value))
                    setattr(module, name, fake_device)
        return super().__enter__()

    def __exit__(self, *exc):
        for module, name, value in reversed(self._patched):
            setattr(module, name, value)
        self._patched.clear()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        fake = any(isinstance(t, OnFake) for t in leaves)
        if fake and func not in _ALLOWED_MIXED and func is not _TO_COPY:
            if any(not isinstance(t, OnFake) and t.dim() > 0 for t in leaves):
                self.mixed.append(str(func))
        wrapper_of = {id(t.elem): t for t in leaves if isinstance(t, OnFake)}

        def wrap(t):  # an in-place op returns its own (wrapped) input, not a new wrapper
            if not isinstance(t, torch.Tensor):
                return t
            known = wrapper_of.get(id(t))
            return OnFake(t) if known is None else known

        args, kwargs = tree_map(lambda t: t.elem if isinstance(t, OnFake) else t, (args, kwargs))
        if func is _TO_COPY:
            target = kwargs.pop("device", None)
            out = func(*args, **kwargs)
            if target is not None and not _is_fake(target):
                return out  # .cpu() / .to("cpu"): a plain tensor again
            if not (fake or _is_fake(target)):
                return out
            self._note_float64(func, out)
            return OnFake(out)
        if _is_fake(kwargs.get("device")):  # a factory function called with device=meta
            kwargs["device"] = torch.device("cpu")
            self._note_float64(func, kwargs)
            return tree_map(
                lambda t: OnFake(t) if isinstance(t, torch.Tensor) else t, func(*args, **kwargs)
            )
        out = func(*args, **kwargs)
        if not fake:
            return out
        self._note_float64(func, out)
        return tree_map(wrap, out)

    def _note_float64(self, func, made) -> None:
        if any(t.dtype == torch.float64 for t in tree_leaves(made) if isinstance(t, torch.Tensor)):
            self.float64.append(str(func))
        elif isinstance(made, dict) and made.get("dtype") == torch.float64:
            self.float64.append(str(func))


# The notebook's kernel imports this file from its folder, FOLDER (it is not in the package).
_ENTER = """\
import sys as _sys
_sys.path.insert(0, FOLDER)
from fake_device import FakeAccelerator as _FakeAccelerator
_sys.path.remove(FOLDER)
_fake = _FakeAccelerator()
_fake.__enter__()
_fake_cells = {}
get_ipython().events.register(
    "post_run_cell", lambda result: _fake_cells.setdefault(result.execution_count, len(_fake.mixed))
)
"""


def run_notebook(path, fast: bool = True, timeout: int = 1800) -> dict[int, list[str]]:
    """Execute a notebook (a copy; the file is not changed) inside ``FakeAccelerator()`` and
    return, for each code cell (by index) that mixed the devices, the offending ops. An
    error a GPU would raise (``.numpy()`` on a device tensor, say) propagates as the cell's
    error.

    Shapes: none.
    """
    import json
    import os
    from pathlib import Path

    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    n_code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    folder = repr(str(Path(__file__).resolve().parent))
    probe = nbformat.v4.new_code_cell(_ENTER.replace("FOLDER", folder))
    report = nbformat.v4.new_code_cell("import json\nprint(json.dumps([_fake.mixed, _fake_cells]))")
    nb.cells = [nb.cells[0], probe, *nb.cells[1:], report]
    os.environ["MULTIHEAD_FAST"] = "1" if fast else "0"
    os.environ["MULTIHEAD_PROGRESS"] = "off"
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": path.parent}}).execute()  # fmt: skip
    mixed, counts = json.loads(nb.cells[-1].outputs[0]["text"])
    # execution counts: 1 is the setup cell, 2 the probe, then the notebook's code cells
    by_cell, before = {}, 0
    for count in sorted(int(k) for k in counts):
        now = counts[str(count)]
        if now > before and count >= 3:
            by_cell[n_code[count - 2]] = mixed[before:now]
        before = now
    return by_cell


if __name__ == "__main__":
    import sys as _sys

    failures = 0
    for arg in _sys.argv[1:]:
        found = run_notebook(arg)
        failures += bool(found)
        print(f"{arg}: " + ("nothing left on the CPU" if not found else f"mixed devices {found}"))
    _sys.exit(1 if failures else 0)
