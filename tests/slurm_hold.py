"""Release requeued jobs from Slurm's hold, for the whole Slurm lane of the suite.

Slurm holds a requeued batch job for about two minutes (reason ``BeginTime``) before it
may start again. The product does not depend on that hold (a real cluster's is often
longer), and tests would spend most of their time in it: every requeue of a survival,
tracking or doctor test. The slurm lane (tests/conftest.py) runs :class:`Releaser`, a
daemon thread that starts each such job ``RELEASE_AFTER_S`` seconds after its requeue.

Not at once: the nodes revoke the old start's credential, and a new start within the
same few seconds is refused ("Job credential revoked") and the job ends FAILED.
"""

from __future__ import annotations

import subprocess
import threading
import time
from datetime import datetime

RELEASE_AFTER_S = 5
POLL_S = 1.0


def held() -> list[tuple[str, float]]:
    """(job id, time of its requeue) of every job pending on the BeginTime hold."""
    try:
        out = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i|%r|%V"], capture_output=True,
                             text=True, timeout=30).stdout
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


def release(job_id: str) -> None:
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True, timeout=30)


def release_due() -> list[str]:
    """Release every held job whose requeue is ``RELEASE_AFTER_S`` old; their ids."""
    due = [job_id for job_id, requeued in held() if time.time() - requeued >= RELEASE_AFTER_S]
    for job_id in due:
        release(job_id)
    return due


class Releaser(threading.Thread):
    """Calls :func:`release_due` every ``POLL_S`` until :meth:`stop`."""

    def __init__(self):
        super().__init__(name="slurm-hold-releaser", daemon=True)
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(POLL_S):
            try:
                release_due()
            except Exception:  # noqa: BLE001 - a helper thread must never end the session
                pass

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)
