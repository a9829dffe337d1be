"""Counts the host synchronisation points that slurmtrain's own code reaches.

On a GPU, reading a device tensor from Python (``Tensor.item``, ``.cpu``, ``.tolist``,
``.numpy``, ``float/int/bool(tensor)``) or ``torch.cuda.synchronize`` makes the CPU wait
until every kernel queued so far has run: the CPU loses its lead and the GPU idles while
the next kernels are launched. A CPU has no device queue, so these calls cost nothing
there, but they are the same calls: counting them on CPU shows where a step would stall
a GPU. ``torch.cuda.set_sync_debug_mode("warn")`` is the check on a GPU (it also sees
syncs made inside C++ kernels, which this Python-level hook cannot).

A call counts when the first frame outside torch that led to it is slurmtrain code
(a torch function called from the trainer, e.g. ``clip_grad_norm_`` with
``error_if_nonfinite``, counts too), except where the tensor read is on the CPU on a
GPU run as well: the optimizer's step counter is a CPU tensor in torch's non-fused
AdamW (the trainer uses the fused one on CUDA, which keeps it on the device), and the
stop flag is a CPU tensor reduced over gloo (``slurmtrain/stop``; reading it waits for the
other hosts, not the device: ``tests/train/test_stop.py`` checks the flag never leaves
the CPU).

    with SyncWatch() as watch:
        watch.armed = True      # count from here
        ...
    watch.calls                 # ["slurmtrain/train/trainer.py:131 _log: Tensor.item", ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

_PACKAGE = str(Path(__file__).resolve().parents[1])  # .../slurmtrain
_TORCH = str(Path(torch.__file__).resolve().parent)
_OPTIM = str(Path(torch.optim.__file__).resolve().parent)
_HERE = str(Path(__file__).resolve())
# (file under the package's parent, function): reads of tensors that are CPU tensors on
# GPU runs too (see the module docstring).
_HOST_ONLY = {("slurmtrain/stop/__init__.py", "agree")}
_METHODS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__")


class SyncWatch:
    """Patches the sync points while active; counts only while ``armed`` is true."""

    def __init__(self) -> None:
        self.armed = False
        self.calls: list[str] = []
        self._saved: dict[str, object] = {}

    def __enter__(self) -> "SyncWatch":
        for name in _METHODS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._wrap(original, f"Tensor.{name}"))
        self._saved["cuda.synchronize"] = torch.cuda.synchronize
        torch.cuda.synchronize = self._wrap(torch.cuda.synchronize, "torch.cuda.synchronize")
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.synchronize = self._saved.pop("cuda.synchronize")
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()

    def _wrap(self, original, label: str):
        watch = self

        def counted(*args, **kwargs):
            if watch.armed:
                site = watch._site()
                if site is not None:
                    watch.calls.append(f"{site}: {label}")
            return original(*args, **kwargs)
        return counted

    def _site(self) -> str | None:
        """``file:line function`` of the slurmtrain frame that led here, or None."""
        frame = sys._getframe(2)  # the caller of the patched method
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(_OPTIM):
                return None  # the optimizer's CPU step counter (see the module docstring)
            if not path.startswith(_TORCH):
                break
            frame = frame.f_back
        if frame is None or not frame.f_code.co_filename.startswith(_PACKAGE) \
                or frame.f_code.co_filename == _HERE:
            return None
        rel = Path(frame.f_code.co_filename).relative_to(Path(_PACKAGE).parent).as_posix()
        if (rel, frame.f_code.co_name) in _HOST_ONLY:
            return None
        return f"{rel}:{frame.f_lineno} {frame.f_code.co_name}"
