"""Every Slurm command the supervisor runs: bounded by a timeout, answered, never raised.

A command can hang (a busy or dead controller) or be killed: when the job is requeued,
Slurm SIGTERMs every process of the job, so a ``scontrol`` that runs then dies with it.
Both come back as an :class:`Answer` (``rc`` 124 for a timeout, ``-15`` for SIGTERM);
the supervisor decides what a failed answer means, and asks again where that is harmless.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Callable

from .. import slurmversion
from ..slurmtext import parse_key_values

TIMEOUT_S = 10.0

@dataclass(frozen=True)
class Answer:
    rc: int
    out: str = ""
    err: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def text(self) -> str:
        return (self.err.strip() or self.out.strip() or f"exit status {self.rc}").replace("\n", " ")


def run_command(argv: list[str], timeout: float) -> Answer:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Answer(124, "", f"{argv[0]} timed out after {timeout:g} s")
    except OSError as err:
        return Answer(127, "", f"{argv[0]}: {err.strerror}")
    return Answer(proc.returncode, proc.stdout, proc.stderr)


class Slurm:
    """The job's Slurm commands. ``ref`` is how Slurm names this job: its id, or
    ``<array id>_<task>`` for an array task (the task's own id names the whole array)."""

    def __init__(self, ref: str, run: Callable[[list[str], float], Answer] = run_command):
        self.ref = ref
        self._run = run

    def call(self, *argv: str, timeout: float = TIMEOUT_S) -> Answer:
        return self._run(list(argv), timeout)

    def show_job(self) -> dict[str, str] | None:
        """The job as ``scontrol show job`` shows it; None when Slurm did not answer."""
        a = self.call("scontrol", "-o", "show", "job", self.ref, timeout=5)
        return parse_key_values(a.out.splitlines()[0]) if a.ok and a.out.strip() else None

    def restarts(self) -> int | None:
        """Slurm's restart count of the job; None when Slurm did not answer."""
        job = self.show_job()
        value = (job or {}).get("Restarts", "")
        return int(value) if value.isdigit() else None

    def state(self) -> str:
        """The job's JobState ("RUNNING", "CANCELLED", ...); "" when Slurm did not answer."""
        return (self.show_job() or {}).get("JobState", "")

    def preempted(self) -> bool | None:
        """Slurm preempted the job (its PreemptTime is set): with a GraceTime Slurm signals
        the tasks only, so no signal reached the supervisor. None: Slurm did not answer."""
        job = self.show_job()
        return None if job is None else job.get("PreemptTime", "None")[:1].isdigit()

    def version(self) -> slurmversion.Version | None:
        """The version the controller runs; None when it did not answer."""
        a = self.call("scontrol", "show", "config")
        return slurmversion.from_config(a.out) if a.ok else None

    def forbid_requeue(self) -> Answer:
        """Requeue=0: the job ends for good when its script does."""
        return self.call("scontrol", "update", f"JobId={self.ref}", "Requeue=0")

    def excluded(self) -> list[str] | None:
        """The job's ExcNodeList; None when Slurm did not answer."""
        job = self.show_job()
        if job is None:
            return None
        value = job.get("ExcNodeList", "(null)")
        return [] if value in ("", "(null)") else (self.hostnames(value) or None)

    def room(self) -> tuple[str, list[str], int] | None:
        """(its partition(s), their nodes, the job's nodes as Slurm shows them now): whether a
        requeue that leaves nodes out can ever start. None when Slurm did not answer."""
        job = self.show_job()
        need = (job or {}).get("NumNodes", "").split("-")[0]
        if job is None or not need.isdigit():
            return None
        parts, pool = job.get("Partition", ""), []
        for part in filter(None, parts.split(",")):
            a = self.call("scontrol", "-o", "show", "partition", part, timeout=5)
            nodes = parse_key_values(a.out.splitlines()[0]).get("Nodes", "") if a.ok and a.out.strip() else ""
            if not nodes:
                return None
            pool += [n for n in self.hostnames(nodes) if n not in pool]
        return (parts, pool, int(need)) if pool else None

    def end_time(self) -> str:
        """When the job ends as Slurm plans it now; a cancel moves it to the cancel's moment."""
        a = self.call("squeue", "-h", "-j", self.ref, "-o", "%e", timeout=5)
        return a.out.strip() if a.ok else ""

    def hostnames(self, nodelist: str) -> list[str]:
        a = self.call("scontrol", "show", "hostnames", nodelist)
        return a.out.split() if a.ok else []

    def unhealthy(self, nodelist: str) -> list[str]:
        """The nodes of ``nodelist`` that Slurm holds down, draining, failing or not responding."""
        a = self.call("sinfo", "-h", "-N", "-t", "down,drain,fail,no_respond", "-n", nodelist, "-o", "%N")
        return sorted(set(a.out.split())) if a.ok else []

    def requeue(self) -> Answer:
        return self.call("scontrol", "requeue", self.ref)

    def requeue_hold(self) -> Answer:
        return self.call("scontrol", "requeuehold", self.ref)

    def set_excluded(self, nodes: list[str]) -> Answer:
        return self.call("scontrol", "update", f"jobid={self.ref}", f"ExcNodeList={','.join(nodes)}")

    def release(self) -> Answer:
        return self.call("scontrol", "release", self.ref)

    def signal_steps(self, signame: str) -> Answer:
        """``signame`` to every step of the job (not the batch step: the supervisor)."""
        return self.call("scancel", f"--signal={signame}", self.ref)
