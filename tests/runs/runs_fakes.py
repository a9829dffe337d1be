"""Slurm faked at the subprocess boundary for the unit tests of slurmtrain.runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

_REAL_RUN = subprocess.run  # the fake replaces the module's `run`: anything not Slurm's goes here
SLURM_TOOLS = ("scontrol", "sacct", "scancel", "squeue", "sbatch", "sinfo", "srun")

RECORDED = Path(__file__).parent / "recorded"
EVENTS = RECORDED / "events"  # events.jsonl files: the sandbox's, and written by hand in the same format


def recorded_cases() -> list[str]:
    return sorted(p.stem for p in EVENTS.glob("*.jsonl"))


def recorded_run(root, case: str):
    """A run directory holding the recorded events of ``case`` (job id from its events)."""
    import json
    import shutil

    from slurmtrain.runs import rundir

    src = EVENTS / f"{case}.jsonl"
    job_id = next(json.loads(line)["job_id"] for line in src.read_text().splitlines() if '"job_id"' in line)
    run = rundir.create(root, case.replace("_", "-"))
    run.update_manifest(name=run.name, job_ids=[job_id], state="submitted", nodes=2,
                        submitted_at="2026-11-21T13:02:23")
    shutil.copy(src, run.path / "events.jsonl")
    return run, job_id


def unended_run(root):
    """A run whose start has begun and not ended (started, two saves): the first events of
    ``node_died_then_completed``."""
    run, job = recorded_run(root, "node_died_then_completed")
    lines = (run.path / "events.jsonl").read_text().splitlines()
    (run.path / "events.jsonl").write_text("\n".join(lines[:4]) + "\n")
    return run, job


class FakeSlurm:
    """Stands in for subprocess.run in slurmquery: answers scontrol/sacct/scancel from
    recorded text and counts the calls."""

    def __init__(self, scontrol: str = "", sacct: str | None = None):
        self.scontrol = scontrol
        self.sacct = sacct            # None: accounting storage is disabled
        self.down: list[str] = []     # the nodes `scontrol show node` says are DOWN
        self.refuse_requeue = ""      # `scontrol requeue` fails with this, when set
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        if Path(str(argv[0])).name not in SLURM_TOOLS:  # not Slurm: matplotlib's first font scan runs fc-list
            return _REAL_RUN(argv, **kwargs)
        self.calls.append(list(argv))
        assert kwargs.get("timeout"), "every Slurm call needs a timeout"
        tool = argv[0]
        if argv[:2] == ["scontrol", "requeue"]:
            return subprocess.CompletedProcess(argv, 1 if self.refuse_requeue else 0, "", self.refuse_requeue)
        if argv[:4] == ["scontrol", "--oneliner", "show", "node"]:
            return subprocess.CompletedProcess(argv, 0, "".join(
                f"NodeName={n} CPUAlloc=1 State={'DOWN+NOT_RESPONDING' if n in self.down else 'MIXED'} "
                "Reason=Not responding [slurm@2026-11-27T06:30:13]\n" for n in argv[4].split(",")), "")
        if tool == "scontrol":
            return subprocess.CompletedProcess(argv, 0, self.scontrol, "")
        if tool == "sinfo":
            asked = argv[argv.index("-n") + 1].split(",")
            return subprocess.CompletedProcess(argv, 0, "".join(f"{n}\n" for n in self.down if n in asked), "")
        if tool == "sacct":
            if self.sacct is None:
                return subprocess.CompletedProcess(
                    argv, 1, "", "sacct: error: Slurm accounting storage is disabled\n")
            return subprocess.CompletedProcess(argv, 0, self.sacct, "")
        if tool == "scancel":
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(f"unexpected command {argv}")

    def count(self, tool: str) -> int:
        return sum(1 for c in self.calls if c[0] == tool)
