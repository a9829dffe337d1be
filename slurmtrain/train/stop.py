"""The stop contract: notice a stop request, agree on it across ranks at a step boundary.

A request is a signal (SIGUSR2, SIGTERM, or the one named in ``$SLURMTRAIN_STOP_SIGNAL``)
or the existence of ``$SLURMTRAIN_STOP_FILE``. The handler only sets a flag: saving a
checkpoint inside a signal handler, in the middle of a collective, would deadlock. At each
step boundary every rank contributes its flag to an all-reduce (MAX), so they all stop
after the same step, the one at which any of them saw the request.

The check costs no device synchronisation: the flag is a CPU tensor reduced over a gloo
group. A device tensor would make ``.item()`` wait, every step, for every kernel queued so
far, which takes away the CPU's lead over the GPU. Only rank 0 looks at the stop file: it
lies in the run directory, which every node sees (the checkpoints need that too), so one
``stat`` per step on the shared filesystem does instead of one per rank; the all-reduce
tells the others.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist

from .. import stop as early_stop

STOP_EXIT_CODE = 75  # "stopped after checkpoint": the job's supervisor requeues on it


def _signals() -> list[signal.Signals]:
    sigs = [signal.SIGUSR2, signal.SIGTERM]
    name = os.environ.get("SLURMTRAIN_STOP_SIGNAL", "").strip().upper()
    if name:
        name = name if name.startswith("SIG") else "SIG" + name
        extra = getattr(signal.Signals, name, None)
        if extra is not None and extra not in sigs and extra not in (signal.SIGKILL, signal.SIGSTOP):
            sigs.append(extra)
    return sigs


def cpu_group():
    """The group the flag travels on: the default one when it carries CPU tensors (its
    backend config names one for ``cpu:``, as ``gloo`` and ``cpu:gloo,cuda:nccl`` do), else
    a new gloo group of every rank (``nccl`` alone). ``new_group`` is a collective: every
    rank must call this at the same point."""
    if "cpu:" in dist.get_backend_config():
        return None
    return dist.new_group(backend="gloo")


class StopRequest:
    """Created by every rank at the same point (it may create a process group)."""

    def __init__(self) -> None:
        self._flag = False
        self.reason = ""
        distributed = dist.is_initialized() and dist.get_world_size() > 1
        self._group = cpu_group() if distributed else None
        self._distributed = distributed
        file = os.environ.get("SLURMTRAIN_STOP_FILE")
        rank0 = not dist.is_initialized() or dist.get_rank() == 0
        self._file = Path(file) if file and rank0 else None
        for sig in _signals():
            signal.signal(sig, self._on_signal)
        if early_stop.reason():  # a stop signal that came while the trainer was starting
            self.request(f"{early_stop.reason()} before training began")

    def _on_signal(self, signum: int, _frame) -> None:
        self._flag = True
        self.reason = signal.Signals(signum).name

    def request(self, reason: str) -> None:
        self._flag, self.reason = True, reason

    def agreed(self) -> bool:
        """True on every rank when any rank was asked to stop. One tiny CPU all-reduce per step."""
        if not self._flag and self._file is not None and self._file.exists():
            self.request(f"stop file {self._file}")
        if not self._distributed:
            return self._flag
        flag = torch.tensor([1 if self._flag else 0], dtype=torch.int32, device="cpu")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        stop = bool(flag[0])  # a CPU tensor: reading it waits for the other hosts, not the device
        if stop and not self._flag:
            self.request("another rank was asked to stop")
        return stop
