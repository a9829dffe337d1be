"""Ask Slurm about many jobs in one query: ``sacct`` where accounting works, else
``scontrol show job``.

Why not submitit's own watcher: it asks ``sacct`` only, and without accounting
storage every job reads UNKNOWN (submitit issue 1720); it also swallows errors and
runs without a timeout. ``scontrol -o show job`` lists every job the controller still
holds (finished ones for MinJobAge seconds) in one RPC, with the exit code and the
requeue count (``Restarts=``) that ``squeue``'s short formats lack.

Job arrays. Slurm answers for an array job with one record per task (``scontrol``:
``JobId=13 ArrayJobId=12 ArrayTaskId=0``; ``sacct``: JobID ``12_0``, JobIDRaw ``13``) and
one for the tasks still pending together (``ArrayTaskId=1-3``, ``12_[1-3]``), each task
under a job id of its own (the last to start keeps the array's). The parsers gather them
into one :class:`JobInfo` under the array's id, the id sbatch printed, whose state is
the tasks' combined (:func:`states.aggregate`) and whose ``tasks`` are the records.
(The scontrol records are the sandbox's, Slurm 22.05; sacct's form is Slurm's documented
one: the sandbox runs without accounting.)

Every call has a timeout; a missing binary or an unreachable controller becomes one
:class:`~slurmtrain.errors.SlurmError` line.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from .. import perms
from ..slurmtext import hostnames, parse_duration, parse_key_values, where_to_set_slurm_conf

from ..errors import SlurmError
from .states import JobState, aggregate, parse_state

QUERY_TIMEOUT_S = 30
SINCE_SLACK_S = 600   # how far before a run's creation its jobs are looked for in the accounting database
_NOT_FOUND_HINT = ("slurmtrain needs the Slurm client commands: run it on a login node, "
                   "or start the sandbox (`slurmtrain sandbox up`)")


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about one job."""

    job_id: str
    state: JobState
    raw_state: str
    source: str                      # "scontrol" or "sacct"
    nodes: int | None = None
    nodelist: str | None = None
    elapsed_s: int | None = None
    exit_code: int | None = None     # of the batch script
    signal: int | None = None        # that ended it, if any
    restarts: int | None = None      # requeue count
    submit_time: str | None = None
    reason: str | None = None
    array_task: str | None = None    # a task's index, or the pending ones ("1-3"), as Slurm writes it
    tasks: tuple["JobInfo", ...] = ()  # an array job's records, one per task or pending range

    def task_infos(self) -> dict[int, "JobInfo"]:
        """An array job's tasks by index (a pending range's record under each of its indices)."""
        return {i: t for t in self.tasks for i in task_indices(t.array_task or "")}


def run_slurm(argv: list[str], timeout: float = QUERY_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a Slurm client command; only "not installed" and "no answer" raise here."""
    began, rc = time.monotonic(), None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        rc = proc.returncode
        return proc
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: command not found; {_NOT_FOUND_HINT}") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:g} s: is the Slurm controller "
                         f"reachable (SLURM_CONF={os.environ.get('SLURM_CONF', '<unset>')})?") from None
    finally:
        _trace(argv, rc, time.monotonic() - began)


def _trace(argv: list[str], rc: int | None, seconds: float) -> None:
    """SLURMTRAIN_SLURM_TRACE=FILE: one line per Slurm call (when, how long, its exit status,
    None where it did not answer): where a slow controller or a stuck watch spends its time."""
    path = os.environ.get("SLURMTRAIN_SLURM_TRACE")
    if not path:
        return
    line = f"{time.strftime('%H:%M:%S')} {seconds:6.2f}s rc={rc} {' '.join(argv)}\n"
    try:
        with open(path, "a") as f:
            f.write(line)
    except OSError:
        pass  # a trace that cannot be written must not fail the query


def one_line(text: str) -> str:
    """Slurm's own message on one line: its lines joined, repeated prefixes kept once."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return "; ".join(dict.fromkeys(lines)) or "(no message)"


def _fail(argv: list[str], proc: subprocess.CompletedProcess) -> SlurmError:
    if "Could not establish a configuration source" in proc.stderr:
        return SlurmError(f"{argv[0]}: Slurm's configuration was not found: set SLURM_CONF "
                          f"({where_to_set_slurm_conf()})")
    return SlurmError(f"{argv[0]} failed (exit {proc.returncode}): {one_line(proc.stderr or proc.stdout)}")


# ---- parsing ---------------------------------------------------------------------------

def format_duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _exit(text: str | None) -> tuple[int | None, int | None]:
    """``3:0`` -> (3, None); ``0:15`` -> (0, 15)."""
    if not text or ":" not in text:
        return None, None
    code, sig = text.split(":", 1)
    try:
        return int(code), (int(sig) or None)
    except ValueError:
        return None, None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


_TASK_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def task_indices(text: str) -> list[int]:
    """Slurm's array task ids: ``3``, ``1-3``, ``[0,2-4:2%1]`` (steps, a throttle) -> indices."""
    out: list[int] = []
    for part in text.strip("[]").split("%")[0].split(","):
        m = _TASK_RANGE.fullmatch(part.strip())
        if m:
            first, last, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
            out.extend(range(first, last + 1, step))
    return out


def combine_array(array_id: str, records: list[JobInfo]) -> JobInfo:
    """One :class:`JobInfo` for array job ``array_id`` from its tasks' records."""
    by_task = sorted(records, key=lambda r: (task_indices(r.array_task or "") or [1 << 30])[0])
    state = aggregate([r.state for r in by_task])
    speaks = next(r for r in by_task if r.state is state) if state.is_final else None  # the task the state is of
    held = [r for r in by_task if r.nodelist]
    # Why tasks wait, or why the array ended as it did (a task's NonZeroExitCode); not a
    # running or completed task's last reason to wait.
    reasons = [f"task {r.array_task}: {r.reason}" for r in by_task
               if r.reason and (r.state is JobState.PENDING or (speaks is not None and r.state is state))]
    return JobInfo(
        job_id=array_id, state=state, raw_state=state.value, source=by_task[0].source,
        nodes=sum(r.nodes or 0 for r in held) or None,
        nodelist=",".join(dict.fromkeys(r.nodelist for r in held if r.nodelist)) or None,
        elapsed_s=max((r.elapsed_s for r in by_task if r.elapsed_s is not None), default=None),
        exit_code=speaks.exit_code if speaks else None, signal=speaks.signal if speaks else None,
        restarts=sum(r.restarts or 0 for r in by_task), submit_time=by_task[0].submit_time,
        reason="; ".join(reasons) or None, tasks=tuple(by_task))


def _gather_arrays(jobs: dict[str, JobInfo], arrays: dict[str, list[JobInfo]]) -> dict[str, JobInfo]:
    """``jobs`` with each array's task records replaced by the array's one record."""
    out = {j: i for j, i in jobs.items() if j not in arrays}
    out.update({a: combine_array(a, records) for a, records in arrays.items()})
    return out


def parse_scontrol(text: str) -> dict[str, JobInfo]:
    """Output of ``scontrol -o show job`` (one job per line; an array job's tasks gathered
    under the array's id, see the module's docstring)."""
    out: dict[str, JobInfo] = {}
    arrays: dict[str, list[JobInfo]] = {}
    for line in text.splitlines():
        kv = parse_key_values(line)
        if "JobId" not in kv:
            continue  # "No jobs in the system"
        code, sig = _exit(kv.get("ExitCode"))
        nodelist = kv.get("NodeList")
        info = JobInfo(
            job_id=kv["JobId"], state=parse_state(kv.get("JobState")), raw_state=kv.get("JobState", ""),
            source="scontrol", nodes=_int(kv.get("NumNodes", "").split("-")[0]),
            nodelist=None if nodelist in (None, "(null)", "") else nodelist,
            elapsed_s=parse_duration(kv.get("RunTime")), exit_code=code, signal=sig,
            restarts=_int(kv.get("Restarts")), submit_time=kv.get("SubmitTime"),
            reason=None if kv.get("Reason") in (None, "None") else kv.get("Reason"),
            array_task=kv.get("ArrayTaskId"))
        if kv.get("ArrayJobId"):
            arrays.setdefault(kv["ArrayJobId"], []).append(info)
        else:
            out[kv["JobId"]] = info
    return _gather_arrays(out, arrays)


SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "NNodes", "NodeList", "Elapsed", "Submit", "Reason", "JobID")
_ARRAY_TASK = re.compile(r"(?P<array>\d+)_(?P<task>\[?[\d,\-:%]+\]?)")


def parse_sacct(text: str) -> dict[str, JobInfo]:
    """Output of ``sacct --parsable2 --noheader --allocations --duplicates --format=SACCT_FIELDS``.

    With ``--duplicates`` a requeued job has one line per start, oldest first; the last
    is the current one and the others count as restarts. Lines before an earlier start
    that ended otherwise than requeued are another job's: the id was handed out again (a
    controller that lost its saved state, as the sandbox's does when its nodes change,
    while the database keeps every job). An array task's JobID is ``<array>_<task>`` (its
    JobIDRaw its own id); its tasks are gathered under the array's id.
    """
    lines_by_job: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        values = line.split("|")
        if len(values) < len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, values))
        if "." in row["JobID"]:
            continue  # a step (batch, extern, 0...), not the allocation
        lines_by_job.setdefault(row["JobID"], []).append(row)
    lines_by_job = {job_id: _this_job(rows) for job_id, rows in lines_by_job.items()}
    out: dict[str, JobInfo] = {}
    arrays: dict[str, list[JobInfo]] = {}
    for job_id, rows in lines_by_job.items():
        row = rows[-1]
        code, sig = _exit(row["ExitCode"])
        nodelist = row["NodeList"]
        task = _ARRAY_TASK.fullmatch(job_id)
        info = JobInfo(
            job_id=row["JobIDRaw"], state=parse_state(row["State"]), raw_state=row["State"], source="sacct",
            nodes=_int(row["NNodes"]), nodelist=None if nodelist in ("", "None assigned") else nodelist,
            elapsed_s=parse_duration(row["Elapsed"]), exit_code=code, signal=sig,
            restarts=len(rows) - 1, submit_time=row["Submit"],
            # The database keeps a job's last reason to wait ("Dependency", "BeginTime") once it
            # runs or has ended: stale then.
            reason=None if row["Reason"] in ("", "None") or parse_state(row["State"]) is not JobState.PENDING
            else row["Reason"],
            array_task=task["task"].strip("[]") if task else None)
        if task:
            arrays.setdefault(task["array"], []).append(info)
        else:
            out[job_id] = info
    return _gather_arrays(out, arrays)


# How a start ends when the job comes back under the same id: Slurm's requeue, a preempted or
# failed node's requeue, a resize. Any other end of an earlier line is a job of its own.
_REQUEUED_STATES = ("REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "PREEMPTED", "NODE_FAIL", "RESIZING")


def _this_job(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The newest job's lines of one id's ``rows`` (oldest first)."""
    keep = len(rows) - 1
    while keep > 0 and rows[keep - 1]["State"].split()[0] in _REQUEUED_STATES:
        keep -= 1
    return rows[keep:]


# ---- queries ---------------------------------------------------------------------------

# Whether sacct works, learned from the first sacct call and kept for the process, per
# slurm.conf version: the sandbox rewrites its slurm.conf when it restarts with or
# without accounting, which changes the key.
_accounting: dict[tuple, bool] = {}


def _conf_key() -> tuple:
    conf = os.environ.get("SLURM_CONF", "")
    try:
        return conf, os.stat(conf).st_mtime_ns if conf else 0
    except OSError:
        return conf, 0

_NO_ACCOUNTING = re.compile(r"accounting storage is disabled|not running a supported accounting_storage"
                            r"|slurmdbd.*(connect|connection)", re.I)


def scontrol_jobs() -> dict[str, JobInfo]:
    """Every job the controller holds, in one RPC."""
    argv = ["scontrol", "--oneliner", "show", "job"]
    proc = run_slurm(argv)
    if proc.returncode != 0:
        raise _fail(argv, proc)
    return parse_scontrol(proc.stdout)


def sacct_jobs(job_ids: Iterable[str], since: float | None = None) -> dict[str, JobInfo] | None:
    """The jobs from the accounting database; None when this cluster has no accounting.
    ``since`` (a time before the jobs were submitted) leaves out older jobs of the same ids:
    the database keeps them, and a controller that lost its saved state hands ids out
    again (until slurmdbd has the new job, sacct would answer with the old one)."""
    ids = sorted(set(job_ids), key=lambda j: (len(j), j))
    key = _conf_key()
    if _accounting.get(key) is False:
        return None
    if not ids:
        return {}
    argv = ["sacct", "--parsable2", "--noheader", "--allocations", "--duplicates",
            "--format=" + ",".join(SACCT_FIELDS), "--jobs=" + ",".join(ids)]
    if since is not None:  # sacct's local time; slack for clocks a little apart
        argv.append("--starttime=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - SINCE_SLACK_S)))
    proc = run_slurm(argv)
    if proc.returncode != 0:
        if _NO_ACCOUNTING.search(proc.stderr):
            _accounting[key] = False
            return None
        raise _fail(argv, proc)
    _accounting[key] = True
    return parse_sacct(proc.stdout)


def query(job_ids: Iterable[str], since: float | None = None) -> dict[str, JobInfo]:
    """Slurm's view of ``job_ids``: one ``sacct`` call with accounting, else one
    ``scontrol`` call. Jobs Slurm no longer knows are absent from the result. ``since``:
    a time before any of them was submitted (:func:`sacct_jobs`).

    With accounting, a job sacct does not list yet (slurmdbd lags a few seconds behind
    the controller) is looked up with scontrol, a second query only in that case.
    """
    ids = [str(j) for j in job_ids]
    if not ids:
        return {}
    found = sacct_jobs(ids, since)
    if found is not None and all(j in found for j in ids):
        return {j: found[j] for j in ids}
    live = scontrol_jobs()
    merged = {j: live[j] for j in ids if j in live}
    merged.update({j: info for j, info in (found or {}).items() if j in ids})
    return merged


def accounting_enabled() -> bool | None:
    """What the last query learned: True, False, or None when not asked yet."""
    return _accounting.get(_conf_key())


def cancel(job_id: str, timeout: float = QUERY_TIMEOUT_S) -> None:
    """End a job as CANCELLED, for good; or change nothing and raise :class:`SlurmError`.

    A plain ``scancel`` sends SIGTERM to the batch step; the job's supervisor tells a
    cancel from a time limit by the job's end time, which a cancel that raced the time
    limit may not move, and would then requeue the job after its stop handling
    (slurmtrain/job), so the job would come back PENDING. Marking it not
    requeueable first makes that ``scontrol requeue`` fail ("presently disabled"), and
    the job stays CANCELLED.

    All or nothing: a job that already ended is left alone, a mark that fails stops
    here, and a failed ``scancel`` takes the mark back, so the job stays requeueable
    (after a preemption, it would otherwise not come back).

    An array job's id names every task to scontrol and scancel: the mark and the cancel
    reach all of them (checked on the sandbox: ``scontrol update JobId=<array>
    Requeue=0`` marks running and pending tasks alike). It has ended when every task has.
    """
    job_id = str(job_id)
    records = _show_job(job_id, timeout)
    states = [parse_state(r.get("JobState")) for r in records]
    if all(s.is_final for s in states):
        raise SlurmError(f"job {job_id} already ended ({aggregate(states).value}); nothing to cancel")
    # A job submitted with --no-requeue has nothing to mark.
    marked = any(r.get("Requeue") == "1" for r in records)
    if marked:
        try:
            _set_requeue(job_id, 0, timeout)
        except SlurmError as err:
            raise _not_yours(job_id, records, err) from None
    argv = ["scancel", job_id]
    try:
        proc = run_slurm(argv, timeout=timeout)
        if proc.returncode != 0:
            raise _fail(argv, proc)
    except SlurmError as err:
        if marked:
            _undo_mark(job_id, err, timeout)
        raise


class BatchHost(NamedTuple):
    host: str          # the node that runs (ran) the batch script
    nodes: list[str]   # the job's nodes as Slurm lists them now (a node it took for dead is gone)


def batch_host(job_id: str, state: JobState = JobState.RUNNING, timeout: float = QUERY_TIMEOUT_S) -> BatchHost | None:
    """Job ``job_id``'s batch host and nodes while Slurm shows the job in ``state``, else
    None. An ended job's record is kept MinJobAge (300 s by default)."""
    try:
        (job,) = [r for r in _show_job(job_id, timeout) if r.get("JobId") == job_id]
    except (SlurmError, ValueError):  # gone, or an array's record: not one job
        return None
    host = job.get("BatchHost", "")
    if parse_state(job.get("JobState")) is not state or host in ("", "(null)"):
        return None
    return BatchHost(host, hostnames(job.get("NodeList", "")))


def down(nodes: list[str], timeout: float = QUERY_TIMEOUT_S) -> list[str]:
    """Those of ``nodes`` that Slurm holds DOWN (after its SlurmdTimeout: not a node that
    missed a ping or two); none where scontrol does not answer.

    The node's own state, not sinfo's: a node that died under a running job is DOWN at once
    (``State=DOWN+NOT_RESPONDING``), while ``sinfo -t down`` leaves it out as "mixed*" until
    Slurm has given up the CPUs it held there, seen taking from seconds to five minutes
    on the networked sandbox."""
    if not nodes:
        return []
    proc = run_slurm(["scontrol", "--oneliner", "show", "node", ",".join(nodes)], timeout=timeout)
    if proc.returncode != 0:
        return []
    records = map(parse_key_values, proc.stdout.splitlines())
    return sorted({r["NodeName"] for r in records if r.get("NodeName") in nodes
                   and r.get("State", "").split("+")[0] == "DOWN"})


def requeue(job_id: str, timeout: float = QUERY_TIMEOUT_S) -> None:
    """``scontrol requeue``; raises :class:`SlurmError` with Slurm's words when refused."""
    argv = ["scontrol", "requeue", job_id]
    proc = run_slurm(argv, timeout=timeout)
    if proc.returncode != 0:
        raise _fail(argv, proc)


def _show_job(job_id: str, timeout: float) -> list[dict[str, str]]:
    """The job's record, or an array job's records (one per task or pending range)."""
    argv = ["scontrol", "--oneliner", "show", "job", job_id]
    proc = run_slurm(argv, timeout=timeout)
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        raise _fail(argv, proc)
    records = [kv for kv in map(parse_key_values, proc.stdout.splitlines())
               if job_id in (kv.get("JobId"), kv.get("ArrayJobId"), f"{kv.get('ArrayJobId')}_{kv.get('ArrayTaskId')}")]
    if records:
        return records
    raise SlurmError(f"Slurm does not know job {job_id} (it ended more than MinJobAge ago, "
                     "or never existed)")


def _not_yours(job_id: str, records: list[dict[str, str]], err: SlurmError) -> SlurmError:
    """Slurm's refusal to touch another user's job ("Invalid user id for job N"), in words
    that name its owner; any other failure as it was."""
    owner = (records[0].get("UserId") or "").split("(")[0] if records else ""
    if not owner or owner == perms.me() or not re.search(r"Invalid user id|Access/permission denied", str(err)):
        return err
    return SlurmError(f"job {job_id} is {owner}'s: only {owner}, or a Slurm operator or administrator, can cancel "
                      "or change it (a run directory a team shares lets you read it, not end its jobs)")


def _set_requeue(job_id: str, value: int, timeout: float) -> None:
    argv = ["scontrol", "update", f"JobId={job_id}", f"Requeue={value}"]
    proc = run_slurm(argv, timeout=timeout)
    if proc.returncode != 0 and not _only_ended_tasks(proc.stderr):
        raise _fail(argv, proc)


def _only_ended_tasks(stderr: str) -> bool:
    """scontrol's answer for an array some of whose tasks have ended: it fails the whole
    update ("65_0: Job has already finished; 65_1: No error") though every task still
    running or queued took it."""
    said = [part.split(":", 1)[1].strip() for part in re.split(r"[;\n]", stderr.strip()) if ":" in part]
    return bool(said) and all(s in ("No error", "Job has already finished") for s in said) \
        and "Job has already finished" in said


def _undo_mark(job_id: str, err: SlurmError, timeout: float) -> None:
    """After a failed scancel: make the job requeueable again, or say that it is not."""
    try:
        _set_requeue(job_id, 1, timeout)
    except SlurmError as undo:
        raise SlurmError(f"{err}; restoring Requeue=1 failed too, so job {job_id} will not be "
                         f"requeued after a preemption: {undo}") from None
