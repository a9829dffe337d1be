"""The run's event log: one JSON object per line in ``<run_dir>/events.jsonl``.

Written by the CLI (submitted, requeued, ...), by the job's supervisor (started, signal
received) and by the trainer (checkpoint saved, resumed). Appends of one short line
with O_APPEND are atomic enough for several writers on a shared file system.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

EVENTS_FILE = "events.jsonl"


def append(run_dir: str | os.PathLike, event: str, when: float | None = None, **fields: Any) -> None:
    """``event`` with ``fields``, at ``when`` (default: now)."""
    record = {"time": round(time.time() if when is None else when, 3), "event": event, **_array_task(run_dir),
              **fields}
    line = json.dumps(record, sort_keys=False) + "\n"
    path = Path(run_dir) / EVENTS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # the umask decides (team: 002)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _array_task(run_dir: str | os.PathLike) -> dict[str, int]:
    """``{"array_task": N}`` for a program in task N of a job array writing to its own run
    directory (the job script exports both), so that the run's reader
    (slurmtrain.eventlog) keeps each task's events apart; else nothing."""
    task, own = os.environ.get("SLURMTRAIN_ARRAY_TASK", ""), os.environ.get("SLURMTRAIN_RUN_DIR")
    if not task.isdigit() or not own:
        return {}
    try:
        return {"array_task": int(task)} if os.path.samefile(own, run_dir) else {}
    except OSError:
        return {}


class EventLogWarning(UserWarning):
    """A line of ``events.jsonl`` that is not an event; it is skipped, and said so."""


# warnings.warn_explicit's "once per location" memory: each bad line is reported once per
# process, not on every read (`slurmtrain watch` reads the file every few seconds).
_REPORTED: dict[Any, Any] = {}


def _report(path: Path, lineno: int, why: str) -> None:
    # Reported at the file's own line: printed as `<path>:<line>: EventLogWarning: <why>`
    # followed by the line itself, once per process.
    warnings.warn_explicit(f"{why}; line skipped", EventLogWarning, str(path), lineno, registry=_REPORTED)


def read(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The events in file order. A line that is not a JSON object with an ``event`` is
    skipped with an :class:`EventLogWarning` naming the file and line; bytes that are not
    UTF-8 read as U+FFFD instead of losing the line."""
    path = Path(run_dir) / EVENTS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    out = []
    for lineno, raw in enumerate(lines, start=1):
        text = raw.decode(errors="replace").strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            if lineno == len(lines):  # no newline yet: a writer was killed in the middle of it
                _report(path, lineno, "the last line is cut short (a writer was killed while writing it)")
            else:
                _report(path, lineno, f"not valid JSON ({err.msg} at column {err.colno})")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("event"), str):
            _report(path, lineno, 'not an event (a JSON object with an "event" name)')
            continue
        out.append(record)
    return out
