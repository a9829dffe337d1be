"""Training metrics: one JSON object per logged step in ``<run_dir>/metrics.jsonl`` (rank 0).

Fields of a train record: step, total_steps, loss, lr, grad_norm, tokens_per_s, samples_per_s,
step_time (s, mean over the steps since the last record), mfu (GPU only: achieved model
FLOPs over the device's dense bf16 peak; null on CPU), peak_mem (GiB; GPU: max allocated,
CPU: max resident set size), epoch. An eval record: step, eval_loss. The file is only ever
appended, so a resumed run continues it and ``slurmtrain watch`` can follow it.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..runfiles import METRICS_FILE  # noqa: F401  (torch-free home of the name)

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from the vendors' data sheets.
_PEAK_BF16 = (
    ("GB200", 2.5e15), ("B200", 2.25e15), ("H200", 989e12), ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12), ("H800", 989e12), ("GH200", 989e12), ("A100", 312e12), ("A800", 312e12),
    ("L40S", 362e12), ("L40", 181e12), ("A10G", 70e12), ("A10", 125e12), ("L4", 121e12),
    ("MI300X", 1307e12), ("MI250X", 383e12),
)


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak, or None (CPU, or a GPU not in the table)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, flops in _PEAK_BF16:
        if key in name:
            return flops
    return None


def peak_mem_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (2**30 if sys.platform == "darwin" else 2**20)


class MetricsLog:
    """Rank 0's metrics file and the one human line per log step."""

    def __init__(self, run_dir: Path, enabled: bool, trackers: Any = None):
        self.path = Path(run_dir) / METRICS_FILE
        self.enabled = enabled
        self.trackers = trackers  # train.tracking.Trackers: W&B/TensorBoard get every record too

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"time": round(time.time(), 3), **record}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.trackers is not None:
            self.trackers.log(record)


class Throughput:
    """Steps, tokens and time since the last log line."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.steps = self.tokens = self.samples = 0

    def skip(self, since: float) -> None:
        """The time since ``since`` (a save, an evaluation) is no step's: left out of the
        rates, the window's steps kept (a reset lost those before a save, and a slow stretch
        just before one went unseen)."""
        self.start += max(time.perf_counter() - since, 0.0)

    def add(self, tokens: int, samples: int) -> None:
        self.steps += 1
        self.tokens += tokens
        self.samples += samples

    def rates(self) -> tuple[float, float, float]:
        """(tokens/s, samples/s, seconds per step) over the window."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return self.tokens / elapsed, self.samples / elapsed, elapsed / max(self.steps, 1)
