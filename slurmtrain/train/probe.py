"""Each rank's own compute speed, for the job supervisor's straggler check.

A step's wall time is the same on every rank (the slowest sets it: the others wait in its
collectives), so it cannot say which node is slow. Every ``every`` steps each rank times a
fixed piece of work of its own, with no collective in it: a matrix product on its device,
synchronised. A node whose device is throttled, shared or stalled takes longer for the
same product. The median of the last ``window`` timings goes out with the rank's heartbeat
(slurmtrain.heartbeat); the supervisor compares nodes (slurmtrain/job/stragglers.py).
The cost: one product of a few milliseconds every ``every`` steps.
"""

from __future__ import annotations

import time
from collections import deque

import torch


class ComputeProbe:
    def __init__(self, device: torch.device, every: int = 10, window: int = 10):
        self.device, self.every = device, every
        self.times: deque[float] = deque(maxlen=window)
        # A few milliseconds of work: long enough that a moment's scheduling noise is small in it.
        size, self.dtype = (4096, torch.bfloat16) if device.type == "cuda" else (320, torch.float32)
        gen = torch.Generator(device="cpu").manual_seed(0)  # not the training stream's numbers
        self.a = torch.randn(size, size, generator=gen).to(device, self.dtype)
        self.repeats = 8 if device.type == "cuda" else 12

    def maybe(self, step: int) -> None:
        """Time the product at every ``every``-th step."""
        if step % self.every == 0:
            self.times.append(self.time_once())

    def time_once(self) -> float:
        self._sync()
        start = time.perf_counter()
        x = self.a
        for _ in range(self.repeats):
            x = torch.mm(x, self.a).div_(self.a.shape[0])  # scaled: the values stay finite
        self._sync()
        return time.perf_counter() - start

    @property
    def mean_ms(self) -> float | None:
        """The median of the window's timings, in ms (a single slow one is noise, not a slow node)."""
        if not self.times:
            return None
        ordered = sorted(self.times)
        return 1000 * ordered[len(ordered) // 2]

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
