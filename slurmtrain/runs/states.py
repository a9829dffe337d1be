"""Slurm job states: one table from Slurm's words to an enum, with an UNKNOWN fallback.

``scontrol`` prints ``JobState=CANCELLED``, ``sacct`` prints ``CANCELLED by 0`` and
``squeue`` may add flags (``RUNNING+``); :func:`parse_state` reads all of them.
"""

from __future__ import annotations

import enum


class JobState(enum.Enum):
    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    STOPPED = "STOPPED"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    RESIZING = "RESIZING"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    REVOKED = "REVOKED"
    # Not Slurm's: sbatch refused the job, so Slurm never had it.
    REFUSED = "REFUSED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_final(self) -> bool:
        """The job will not run again by itself.

        PREEMPTED is not final: with PreemptMode=REQUEUE (and our own requeue) the job
        comes back as PENDING under the same id.
        """
        return self in _FINAL

    @property
    def is_active(self) -> bool:
        """Queued or running: something Slurm is still doing."""
        return not self.is_final and self is not JobState.UNKNOWN


_FINAL = frozenset({
    JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
    JobState.NODE_FAIL, JobState.BOOT_FAIL, JobState.DEADLINE, JobState.OUT_OF_MEMORY,
    JobState.REVOKED, JobState.REFUSED,
})

# Abbreviations squeue prints with %t, and older spellings.
_ALIASES = {
    "PD": JobState.PENDING, "R": JobState.RUNNING, "CG": JobState.COMPLETING,
    "CD": JobState.COMPLETED, "F": JobState.FAILED, "CA": JobState.CANCELLED,
    "TO": JobState.TIMEOUT, "PR": JobState.PREEMPTED, "NF": JobState.NODE_FAIL,
    "BF": JobState.BOOT_FAIL, "DL": JobState.DEADLINE, "OOM": JobState.OUT_OF_MEMORY,
    "CF": JobState.CONFIGURING, "RQ": JobState.REQUEUED, "RH": JobState.REQUEUE_HOLD,
    "RF": JobState.REQUEUE_FED, "S": JobState.SUSPENDED, "ST": JobState.STOPPED,
    "SI": JobState.SIGNALING, "SO": JobState.STAGE_OUT, "RS": JobState.RESIZING,
    "SE": JobState.SPECIAL_EXIT, "RV": JobState.REVOKED, "RD": JobState.RESV_DEL_HOLD,
    "CANCELED": JobState.CANCELLED,
}


def parse_state(text: str | None) -> JobState:
    """``"CANCELLED by 0"`` -> CANCELLED; ``"RUNNING+"`` -> RUNNING; anything else -> UNKNOWN."""
    if not text:
        return JobState.UNKNOWN
    word = text.strip().split()[0].rstrip("+*").upper() if text.strip() else ""
    try:
        return JobState(word)
    except ValueError:
        return _ALIASES.get(word, JobState.UNKNOWN)


# The state an array job reports when its tasks ended differently: the one that says
# most about what went wrong first.
_WORST_FIRST = (JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL, JobState.BOOT_FAIL,
                JobState.TIMEOUT, JobState.DEADLINE, JobState.CANCELLED, JobState.REVOKED, JobState.REFUSED)


def aggregate(states: list[JobState]) -> JobState:
    """One state for the tasks of a job array: RUNNING while any task runs, else the state
    of a task still queued or coming back (PENDING, REQUEUED...); once none is, COMPLETED
    if every task completed, else the worst end (FAILED first; UNKNOWN when a task's end
    is not known and no other went wrong)."""
    if not states:
        return JobState.UNKNOWN
    if JobState.RUNNING in states:
        return JobState.RUNNING
    active = [s for s in states if s.is_active]
    if active:
        return active[0]
    ended = [s for s in states if s.is_final and s is not JobState.COMPLETED]
    if ended:
        return min(ended, key=lambda s: _WORST_FIRST.index(s) if s in _WORST_FIRST else len(_WORST_FIRST))
    return JobState.UNKNOWN if JobState.UNKNOWN in states else JobState.COMPLETED
