"""Who the job is and what the job script asked of the supervisor: read once at its start,
never changed (the supervisor's own state is :class:`slurmtrain.job.decide.State`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    """Time and signals (:class:`signals.Signals`; a controllable one in the tests)."""

    def now(self) -> float: ...
    def wall(self) -> float: ...
    def wait(self, seconds: float) -> None: ...
    def take(self) -> list[int]: ...


@dataclass(frozen=True)
class Config:
    """The knobs the job script passes (the profile's resilience keys)."""

    run_dir: Path
    stop_signal: int
    stop_timeout: int
    max_requeues: int
    restarts_in_job: int
    hang_timeout: int              # 0: derived from the run (hangs.py)
    rendezvous_timeout: int
    requeue_always: bool
    bad_node_hours: float
    preflight: bool
    spare_nodes: int = 0           # slurm.spare_nodes: allocated beyond the run's, idle until a node is lost
    straggler_pct: float = 0       # resilience.straggler_pct (0: off)
    warning_seconds: int = 0       # resilience.signal_seconds: the time-limit warning's lead (0: no own timer)


@dataclass(frozen=True)
class Job:
    """Who this job is, from Slurm's environment."""

    job_id: str
    ref: str                       # how Slurm commands name it: "<array>_<task>" for an array task
    tag: str                       # how file names name it: the job id, or "<array>_<task>"
    restarts: int
    nodelist: str
    array_job_id: str = ""
    array_task: int | None = None
    array_tasks: int | None = None

    @classmethod
    def from_env(cls, env: dict[str, str]) -> "Job":
        job_id, task = env.get("SLURM_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
        if task.isdigit():
            array = env.get("SLURM_ARRAY_JOB_ID", job_id)
            ref = f"{array}_{task}"
            return cls(job_id, ref, ref, int(env.get("SLURM_RESTART_COUNT") or 0), env.get("SLURM_JOB_NODELIST", ""),
                       array, int(task), int(env.get("SLURM_ARRAY_TASK_COUNT") or 0) or None)
        return cls(job_id, job_id, job_id, int(env.get("SLURM_RESTART_COUNT") or 0), env.get("SLURM_JOB_NODELIST", ""))
