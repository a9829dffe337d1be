"""The stop contract: notice a stop request, agree on it across ranks at a step boundary.

A request is a signal (SIGUSR2, SIGTERM, or the one named in ``$SLURMTRAIN_STOP_SIGNAL``)
or the existence of ``$SLURMTRAIN_STOP_FILE``. The handler only sets a flag: saving a
checkpoint inside a signal handler, in the middle of a collective, would deadlock. At each
step boundary every rank contributes its flag to an all-reduce (MAX), so they all stop
after the same step even when only one of them got the signal.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist

STOP_EXIT_CODE = 75  # "stopped after checkpoint": the job script requeues on it


def _signals() -> list[signal.Signals]:
    sigs = [signal.SIGUSR2, signal.SIGTERM]
    name = os.environ.get("SLURMTRAIN_STOP_SIGNAL", "").strip().upper()
    if name:
        name = name if name.startswith("SIG") else "SIG" + name
        extra = getattr(signal.Signals, name, None)
        if extra is not None and extra not in sigs and extra not in (signal.SIGKILL, signal.SIGSTOP):
            sigs.append(extra)
    return sigs


class StopRequest:
    def __init__(self, device: torch.device):
        self._flag = False
        self.reason = ""
        self._device = device
        file = os.environ.get("SLURMTRAIN_STOP_FILE")
        self._file = Path(file) if file else None
        for sig in _signals():
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame) -> None:
        self._flag = True
        self.reason = signal.Signals(signum).name

    def request(self, reason: str) -> None:
        self._flag, self.reason = True, reason

    def agreed(self) -> bool:
        """True on every rank when any rank was asked to stop. One tiny all-reduce per step."""
        if not self._flag and self._file is not None and self._file.exists():
            self.request(f"stop file {self._file}")
        flag = torch.tensor([1 if self._flag else 0], dtype=torch.int32, device=self._device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() and not self._flag:
            self.request("another rank was asked to stop")
        return bool(flag.item())
