"""Release requeued jobs from Slurm's hold, for each Slurm lane of the suite.

Slurm holds a requeued batch job for about two minutes (reason ``BeginTime``) before it
may start again. The product does not depend on that hold (a real cluster's is often
longer), and tests would spend most of their time in it: every requeue of a survival,
tracking or doctor test. Each Slurm lane (tests/conftest.py) runs :class:`Releaser`, a
daemon thread that starts each such job ``RELEASE_AFTER_S`` seconds after its requeue.

Not at once: the nodes revoke the old start's credential, and a new start within the
same few seconds is refused ("Job credential revoked") and the job ends FAILED.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from datetime import datetime

RELEASE_AFTER_S = 5
POLL_S = 1.0


def _env(slurm_conf: str | None) -> dict[str, str] | None:
    """The environment that reaches ``slurm_conf``'s controller (None: this process's own)."""
    return None if slurm_conf is None else dict(os.environ, SLURM_CONF=slurm_conf)


def held(slurm_conf: str | None = None) -> list[tuple[str, float]]:
    """(job id, time of its requeue) of every job pending on the BeginTime hold."""
    try:
        out = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i|%r|%V"], capture_output=True,
                             text=True, timeout=30, env=_env(slurm_conf)).stdout
    except (OSError, subprocess.SubprocessError):  # the sandbox is restarting
        return []
    jobs = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or parts[1] != "BeginTime":
            continue
        try:
            jobs.append((parts[0], datetime.strptime(parts[2], "%Y-%m-%dT%H:%M:%S").timestamp()))
        except ValueError:
            continue
    return jobs


def release(job_id: str, slurm_conf: str | None = None) -> None:
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True, timeout=30,
                   env=_env(slurm_conf))


def release_due(slurm_conf: str | None = None) -> list[str]:
    """Release every held job whose requeue is ``RELEASE_AFTER_S`` old; their ids."""
    due = [job_id for job_id, requeued in held(slurm_conf) if time.time() - requeued >= RELEASE_AFTER_S]
    for job_id in due:
        release(job_id, slurm_conf)
    return due


class Releaser(threading.Thread):
    """Calls :func:`release_due` on the sandbox of ``slurm_conf`` every ``POLL_S`` until
    :meth:`stop` (one thread per sandbox: each Slurm lane of the suite has its own)."""

    def __init__(self, slurm_conf: str):
        super().__init__(name=f"slurm-hold-releaser {slurm_conf}", daemon=True)
        self.slurm_conf = slurm_conf
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(POLL_S):
            try:
                release_due(self.slurm_conf)
            except Exception:  # noqa: BLE001 - a helper thread must never end the session
                pass

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)
