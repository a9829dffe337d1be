"""Run the doctor: render the check job through the same path as a training job (so
its container, fabric environment, setup lines and launcher are the run's), submit it
(or run it inside the allocation the command was started from), wait, and report.

Torch-free: torch runs only in :mod:`.node`, on the nodes.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import events
from ..errors import ConfigError
from ..profile import LoadedProfile
from ..render import JobSpec
from . import checks as checks_mod
from .. import arrivals, launchers, ledger, slurmversion
from . import report
from .report import FAIL, PASS, SLURM_NODE, WARN, Row
from ..eventlog import Ev

# Profile settings the doctor job always runs with: one process per node (the checks
# are per node), no requeue (a doctor that failed should say so, not start again).
OVERRIDES = ("launch.procs_per_node=1", "resilience.requeue=false")
DEFAULT_TIME = "00:10:00"
MULTI_NODE = ("allreduce", "clock")

DOCTOR_JOB_NAME = "doctor"  # its checks' jobs are runs too (`status` with no RUN skips them)


@dataclass(frozen=True)
class Outcome:
    run_dir: Path
    job_id: str
    rows: list[Row]

    @property
    def failed(self) -> bool:
        return bool(report.failures(self.rows))


def require(loaded: LoadedProfile, chosen: tuple[str, ...], explicit: bool) -> None:
    """What a check needs from the profile; asked-for checks that cannot run are an error."""
    p = loaded.profile
    if explicit and p.slurm.nodes < 2:
        for name in chosen:
            if name in MULTI_NODE:
                raise ConfigError(f"--checks {name}", "", f"needs at least 2 nodes, and the job has "
                                  f"{p.slurm.nodes} (--nodes, else the profile {loaded.name}'s slurm.nodes): "
                                  "give --nodes 2 or more")


def job_spec(loaded: LoadedProfile, chosen: tuple[str, ...], check_timeout: float, seconds: float) -> JobSpec:
    node_checks = [c for c in chosen if c in checks_mod.NODE_CHECKS] or ["versions"]
    cmd = ["python3", "-m", "slurmtrain.doctor.node", "--checks", ",".join(node_checks),
           "--check-timeout", f"{check_timeout:g}", "--seconds", f"{seconds:g}",
           "--rdzv-port", str(loaded.profile.launch.rdzv_port),
           "--rdzv-port-spread", str(loaded.profile.launch.rdzv_port_spread)]
    cmd += launchers.get(loaded.profile.launch.launcher).gate_args  # what its nodes must have too
    return JobSpec(command=tuple(cmd), job_name=DOCTOR_JOB_NAME, regen_command="slurmtrain doctor")


def doctor(loaded: LoadedProfile, chosen: tuple[str, ...], runs_dir: str | os.PathLike, *,
           check_timeout: float = 60.0, seconds: float = 2.0, say: Callable[[str], None] = print,
           poll_s: float = 2.0) -> Outcome:
    from ..runs import submit as submit_mod

    run = submit_mod.prepare(loaded, job_spec(loaded, chosen, check_timeout, seconds), runs_dir,
                             use_ledger=False)  # doctor is how a ledger node gets checked again
    if os.environ.get("SLURM_JOB_ID"):
        job_id = os.environ["SLURM_JOB_ID"]
        say(f"inside allocation {job_id}: running the checks on its nodes; run directory {run.path}")
        with open(run.logs / f"job-{job_id}.out", "ab") as log:
            subprocess.run(["bash", str(run.script)], stdout=log, stderr=subprocess.STDOUT, check=False)
    else:
        job_id = submit_mod.submit_run(run).job_id
        say(f"submitted doctor job {job_id}; run directory {run.path}")
        _wait(job_id, run.made_at, say, poll_s)
    marks = arrivals.marks_dir(run.path, job_id)  # the nodes' arrival marks (templates/task.j2)
    rows = report.rows(_nodes(run.path), report.load_results(run.path / "doctor"), chosen,
                       report.Expect(loaded.profile.slurm.gpus_per_node, loaded.profile.fabric.expected_busbw_gbps),
                       arrivals.arrived(marks), arrivals.setup_failures(marks))
    rows = _with_node_errors(rows, run.logs, job_id)
    if not _nodes(run.path):
        rows.append(Row("(job)", "setup", "-", FAIL, f"the doctor job {job_id} never started its nodes; see {run.logs}"))
    config = slurmversion.config_text()  # one ask, for the version and the slurm rows; "" if no answer
    if "slurm" in chosen:
        rows += slurm_rows(loaded, job_id, config)
    out = Outcome(run.path, job_id, rows)
    version = slurmversion.text(slurmversion.from_config(config))
    (run.path / "doctor.json").write_text(report.to_json(rows, job_id=job_id, profile=loaded.name,
                                                         checks=list(chosen), run_dir=str(run.path),
                                                         slurm_version=version))
    blamed = _nodes_to_blame(rows)
    for r in blamed:  # the report stands whether or not the ledger takes the node
        failed = ledger.record(runs_dir, r.node, f"doctor: {r.check}: {r.detail or r.figure}", run=run.name,
                               job_id=job_id, source="doctor")
        if failed:
            say(f"doctor: {failed}")
    spared = sorted({r.check for r in report.failures(rows) if r.node not in (SLURM_NODE, "(job)")} -
                    {r.check for r in blamed})
    if spared:
        say(f"doctor: {', '.join(spared)} failed on every node: the profile's or the environment's doing, not a "
            "node's; no node put in the bad-node ledger for it")
    events.append(run.path, Ev.DOCTOR, passed=not out.failed)
    return out


def _with_node_errors(rows: list[Row], logs: Path, job_id: str) -> list[Row]:
    """A node that started and wrote no result: what its log says went wrong there (the
    container runtime's FATAL line, a traceback's last line), not only where to look."""
    from .. import programlog
    out = []
    for r in rows:
        said = programlog.program_error(programlog.tail_lines(logs / f"{job_id}-{r.node}.out")) \
            if r.check == "checks" and r.verdict == FAIL else None
        out.append(dataclasses.replace(r, detail=f"{said.line} (its log: {logs}/{job_id}-{r.node}.out)") if said else r)
    return out


def _nodes_to_blame(rows: list[Row]) -> list[Row]:
    """The failed checks that go in the bad-node ledger: a node's own. A check that failed on
    every node checked (two or more) is the profile's or the program's doing (a setup line, a
    missing module or image), as the job's start-up reads it: no node is to blame."""
    failed = [r for r in report.failures(rows) if r.node not in (SLURM_NODE, "(job)")]
    nodes = {r.node for r in rows if r.node not in (SLURM_NODE, "(job)")}
    everywhere = {check for check in {r.check for r in failed}
                  if len(nodes) > 1 and {r.node for r in failed if r.check == check} == nodes}
    return [r for r in failed if r.check not in everywhere]


def _wait(job_id: str, since: float | None, say: Callable[[str], None], poll_s: float) -> None:
    from ..runs import slurmquery
    last = None
    while True:
        info = slurmquery.query([job_id], since).get(job_id)
        state = info.raw_state if info else "gone"
        if state != last:
            say(f"job {job_id}: {state}")
            last = state
        if info is None or not info.state.is_active:
            return
        time.sleep(poll_s)


def _nodes(run_dir: Path) -> list[str]:
    """The job's nodes, from its ``started`` event (the script writes Slurm's list)."""
    for e in reversed(events.read(run_dir)):
        if e.get("event") == "started" and e.get("nodes"):
            return str(e["nodes"]).split()
    return []


def slurm_rows(loaded: LoadedProfile, job_id: str, config: str) -> list[Row]:
    """Partition facts from scontrol, the version and JobRequeue from ``config`` (the text of
    ``scontrol show config``), and whether sacct answers."""
    from ..runs.slurmquery import run_slurm
    from ..slurmtext import parse_key_values
    part = loaded.profile.slurm.partition
    proc = run_slurm(["scontrol", "show", "partition", "-o"] + ([part] if part else []))
    parts = [parse_key_values(line) for line in proc.stdout.splitlines() if line.strip()]
    info = next((p for p in parts if part or p.get("Default") == "YES"), None)
    if proc.returncode != 0 or info is None:
        return [Row(SLURM_NODE, "slurm", f"partition {part or '(default)'}", FAIL,
                    (proc.stderr.strip() or "scontrol shows no such partition"))]
    rows = [_partition_row(info)]
    rows.append(_version_row(slurmversion.from_config(config)))
    requeue = next((line.split("=", 1)[1].strip() for line in config.splitlines()
                    if line.startswith("JobRequeue")), "?")
    rows.append(Row(SLURM_NODE, "slurm", f"JobRequeue={requeue}", PASS,
                    "requeue by default" if requeue == "1" else "jobs requeue only when asked (the script asks: --requeue)"))
    acct = run_slurm(["sacct", "-n", "-X", "-P", "-o", "JobID", "-j", str(job_id)])
    answers = acct.returncode == 0 and bool(acct.stdout.strip())
    rows.append(Row(SLURM_NODE, "slurm", "sacct answers" if answers else "sacct: no answer", PASS if answers else WARN,
                    "" if answers else "no accounting: slurmtrain reads scontrol (finished jobs are forgotten "
                    "after MinJobAge)"))
    return rows


def _version_row(version: slurmversion.Version | None) -> Row:
    figure = f"Slurm {slurmversion.text(version)}"
    if version is None:
        return Row(SLURM_NODE, "slurm", figure, WARN, "scontrol show config names no SLURM_VERSION")
    return Row(SLURM_NODE, "slurm", figure, WARN if slurmversion.warning(version) else PASS,
               slurmversion.warning(version) or "")


def _partition_row(info: dict[str, str]) -> Row:
    mode, grace, state = info.get("PreemptMode", "?"), info.get("GraceTime", "0"), info.get("State", "?")
    figure = f"partition {info.get('PartitionName')}: State={state} PreemptMode={mode} GraceTime={grace}"
    if state != "UP":
        return Row(SLURM_NODE, "slurm", figure, FAIL, "the partition does not start jobs")
    if "CANCEL" in mode:
        return Row(SLURM_NODE, "slurm", figure, WARN, "preemption cancels jobs: runs are not requeued")
    if mode not in ("OFF", "?") and grace in ("0", "00:00:00"):
        return Row(SLURM_NODE, "slurm", figure, WARN, "preemption with GraceTime=0: no time to checkpoint")
    return Row(SLURM_NODE, "slurm", figure, PASS)
