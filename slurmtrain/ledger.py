"""The bad-node ledger: ``<runs dir>/bad-nodes.jsonl``, shared by every run under it.

One JSON object a line: ``{"time": <epoch s>, "node", "reason", "run", "job_id",
"source"}`` where source is ``doctor``, ``watchdog`` (the start-up watchdog named the
node), ``setup`` (a setup line failed there), ``node_failure`` (after Slurm requeued the job
for a node failure: the job's nodes sinfo shows down), ``gate`` (the in-job preflight),
``in_job`` (its ranks failed first, or hung, in two launches of one job start) or
``straggler`` (its ranks computed slower than the other nodes': recorded, never excluded,
since a slow node still works and a busy shared machine can look slow for a while).
The job's supervisor (slurmtrain/job) appends to it through :func:`add`; the ledger path is
the parent of the run directory, i.e. the runs directory. Below ``runs/``, ``doctor/`` and
``job/``, which all import it.

An entry counts for ``resilience.bad_node_hours`` (a profile key) after its time;
``submit`` and ``resubmit`` pass the nodes with a counting entry to sbatch as
``--exclude``. ``slurmtrain nodes`` lists them, ``slurmtrain nodes forget`` removes them.

Each user's ledger is in their own runs directory. A site may keep one more, read-only for
users, named by ``$SLURMTRAIN_SITE_LEDGER`` (set where the site sets its modules, so jobs
inherit it): its entries exclude nodes as the user's do, and are never written or forgotten
by slurmtrain (its admins keep it, e.g. from a health check's cron job).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "bad-nodes.jsonl"
SITE_VAR = "SLURMTRAIN_SITE_LEDGER"


@dataclass(frozen=True)
class Entry:
    time: float
    node: str
    reason: str
    run: str = ""
    job_id: str = ""
    source: str = ""


def path(runs_dir: str | os.PathLike) -> Path:
    return Path(runs_dir) / FILE


def add(runs_dir: str | os.PathLike, node: str, reason: str, *, run: str = "", job_id: str = "",
        source: str = "", now: float | None = None) -> Entry:
    entry = Entry(time.time() if now is None else now, node, reason, run, str(job_id), source)
    p = path(runs_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry)) + "\n")
    return entry


def record(runs_dir: str | os.PathLike, node: str, reason: str, **fields: str) -> str | None:
    """:func:`add`, for a job or a check whose work must not end on the ledger: None, or what
    went wrong in words (a shared runs directory whose ledger is a teammate's, read-only)."""
    try:
        add(runs_dir, node, reason, **fields)
    except OSError as err:
        from . import perms
        where = err.filename or path(runs_dir)
        return (f"could not record {node} in the bad-node ledger ({where}: {err.strerror or err}; "
                f"{perms.explain(where)}); it is not excluded later")
    return None


def site_path() -> Path | None:
    """The site's read-only ledger, if ``$SLURMTRAIN_SITE_LEDGER`` names one."""
    value = os.environ.get(SITE_VAR, "").strip()
    return Path(value) if value else None


def read(runs_dir: str | os.PathLike) -> list[Entry]:
    """Every entry of the user's ledger, oldest first; a line that is not an entry (a torn
    write) is skipped."""
    return _read_file(path(runs_dir))


def read_site() -> list[Entry]:
    """Every entry of the site's ledger (none without one; an unreadable one counts as
    empty: a site's file must not stop a user's submission)."""
    site = site_path()
    return _read_file(site) if site else []


def _read_file(p: Path) -> list[Entry]:
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        return []
    out = []
    for line in lines:
        try:
            d = json.loads(line)
            out.append(Entry(float(d["time"]), str(d["node"]), str(d.get("reason", "")), str(d.get("run", "")),
                             str(d.get("job_id", "")), str(d.get("source", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def active(entries: list[Entry], hours: float, now: float | None = None) -> dict[str, Entry]:
    """node -> its newest entry younger than ``hours`` (0: none counts)."""
    now = time.time() if now is None else now
    out: dict[str, Entry] = {}
    for e in entries:
        if hours > 0 and now - e.time < hours * 3600:
            out[e.node] = e
    return out


RECORD_ONLY = frozenset({"straggler"})  # sources that name a node without excluding it


def excluded(runs_dir: str | os.PathLike, hours: float, now: float | None = None) -> list[str]:
    """The nodes a new job under ``runs_dir`` should not get, sorted: the user's ledger's and
    the site's."""
    entries = read_site() + read(runs_dir)
    return sorted(active([e for e in entries if e.source not in RECORD_ONLY], hours, now))


def forget(runs_dir: str | os.PathLike, nodes: list[str] | None) -> int:
    """Remove the entries of ``nodes`` (None: all); returns how many went. The file is
    replaced whole (a rename), so a reader never sees half of it."""
    entries = read(runs_dir)
    keep = [] if nodes is None else [e for e in entries if e.node not in set(nodes)]
    p = path(runs_dir)
    if not p.exists():
        return 0
    tmp = p.with_name(f".{FILE}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(asdict(e)) + "\n" for e in keep), encoding="utf-8")
    os.chmod(tmp, p.stat().st_mode & 0o777)  # a team's ledger stays group-writable when one member forgets
    tmp.replace(p)
    return len(entries) - len(keep)


def hours_of_run(run_dir: str | os.PathLike, default: float = 24.0) -> float:
    """``resilience.bad_node_hours`` of the profile a run was submitted with (its profile.toml)."""
    from ._toml import tomllib
    try:
        data = tomllib.loads((Path(run_dir) / "profile.toml").read_text(encoding="utf-8"))
        return float(data.get("resilience", {}).get("bad_node_hours", default))
    except (OSError, ValueError, TypeError, AttributeError):
        return default
