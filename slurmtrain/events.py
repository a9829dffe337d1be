"""The run's event log: one JSON object per line in ``<run_dir>/events.jsonl``.

Written by the CLI (submitted, requeued, ...), by the batch script (started, signal
received) and by the trainer (checkpoint saved, resumed). Appends of one short line
with O_APPEND are atomic enough for several writers on a shared file system.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

EVENTS_FILE = "events.jsonl"


def append(run_dir: str | os.PathLike, event: str, **fields: Any) -> None:
    record = {"time": round(time.time(), 3), "event": event, **fields}
    line = json.dumps(record, sort_keys=False) + "\n"
    path = Path(run_dir) / EVENTS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a killed writer; the rest stay readable
    return out
