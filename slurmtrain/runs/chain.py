"""Chains: a run whose job starts after other runs' jobs end (``submit --after RUN``).

Slurm holds the job with ``--dependency`` (``afterok`` for ``--after``/``--after-ok``,
``afterany`` for ``--after-any``; on an array, all its tasks) and, with
``--kill-on-invalid-dep=yes``, cancels it as soon as a dependency can never be met (the
run it waits for failed or was cancelled), whether or not the site sets
``kill_invalid_depend``: a waiting job never sits PENDING for ever.

What is recorded: the waiting run's manifest holds ``after`` (run, directory, job id, kind);
the run waited for gets a line in its ``dependents.jsonl``. ``status`` of the waiting run
says what it waits for (:func:`waiting_note`) and, once Slurm has cancelled it, why
(:func:`never_note`), with a ``dependency_never_satisfied`` event in its run directory.

Torch-free; talks to Slurm only through :mod:`track` (status of the runs waited for).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import dependents, perms
from ..errors import UsageError
from . import rundir

OPTIONS = {"after": "afterok", "after_ok": "afterok", "after_any": "afterany"}


@dataclass(frozen=True)
class After:
    kind: str     # afterok | afterany
    run: str      # the run waited for, by name
    path: str     # its directory
    job_id: str   # its job (an array's id: all its tasks)

    def words(self) -> str:
        end = "completes" if self.kind == "afterok" else "ends"
        return f"{self.run} (job {self.job_id}) {end}"


def option_name(kind_option: str) -> str:
    return "--" + kind_option.replace("_", "-")


def resolve(wanted: Iterable[tuple[str, str]], runs_dir: str | os.PathLike,
            status_of: Callable[[rundir.RunDir], Any]) -> tuple[list[After], list[str]]:
    """(what to wait for, notes) for ``(option, RUN)`` pairs (option: a key of :data:`OPTIONS`).
    A run that already ended well (or at all, for ``--after-any``) needs no waiting: a note
    says so. A run that can never complete (failed, cancelled), one never queued, or a name
    that is no run: UsageError (exit 2), naming the option and the run, nothing queued.
    ``status_of``: a run's status with its events (track.py's; given by the caller, as
    track.py reads this module for its waiting notes)."""
    afters, notes = [], []
    for option, ref in wanted:
        flag = f"{option_name(option)} {ref}"
        try:
            run = rundir.resolve(ref, runs_dir)
        except UsageError as err:
            raise UsageError(f"{flag}: {err}") from None
        st = status_of(run)
        if st.job_id is None:
            raise UsageError(f"{flag}: run {run.name} has no job (it was never queued: {st.note or st.state.value})")
        kind = OPTIONS[option]
        if st.ended:
            if kind == "afterany" or st.outcome == "completed":
                notes.append(f"{flag}: run {run.name} already ended ({st.outcome or st.state.value}): nothing to wait for")
                continue
            raise UsageError(f"{flag}: run {run.name} ended {st.outcome or st.state.value} (job {st.job_id}, "
                             f"{st.state.value}): a run after it would never start; use --after-any to run "
                             "after it whatever its end")
        afters.append(After(kind, run.name, str(run.path), st.job_id))
    return afters, notes


def sbatch_args(afters: list[After]) -> tuple[str, ...]:
    """``--dependency`` (every one must hold: Slurm's ``,``) and the cancel on a dependency
    that can never be met."""
    if not afters:
        return ()
    spec = ",".join(f"{a.kind}:{a.job_id}" for a in afters)
    return (f"--dependency={spec}", "--kill-on-invalid-dep=yes")


def refuse_unrecordable(afters: list[After]) -> None:
    """Refuse, before anything is made or queued, a run waited for that this user cannot tell
    of the new run (a teammate's, made under umask 022): its ``dependents.jsonl`` is how its
    job tells the waiting run that it will never start."""
    for a in afters:
        bad = perms.unwritable([Path(a.path), Path(a.path) / dependents.FILE])
        if bad is not None:
            raise UsageError(perms.refusal(bad, f"a run to start after {a.run}"))


def record(run: rundir.RunDir, afters: list[After]) -> None:
    """The waiting run's manifest names what it waits for; each run waited for lists it."""
    if not afters:
        return
    run.update_manifest(after=[asdict(a) for a in afters])
    for a in afters:
        dependents.add(a.path, run.name, str(run.path), a.kind)


def afters_of(run: rundir.RunDir) -> list[After]:
    return [After(**a) for a in run.manifest().get("after") or []]


def waiting_note(afters: list[After], reason: str | None) -> str | None:
    """The status line of a job Slurm holds for its dependencies (``reason`` None: not known,
    as sacct shows a pending job's until it starts)."""
    if not afters or (reason is not None and not reason.startswith("Dependency")):
        return None
    return "waits until " + " and ".join(a.words() for a in afters)


def never_note(run: rundir.RunDir, afters: list[After], upstream: dict[str, Any]) -> str:
    """Why the job was cancelled without running: the runs waited for that ended badly
    (``upstream``: run path -> its RunStatus). Recorded once as an event in ``run``."""
    bad = [a for a in afters if a.kind == "afterok" and upstream.get(a.path) is not None
           and upstream[a.path].ended and upstream[a.path].outcome != "completed"]
    why = "; ".join(f"{a.run} (job {a.job_id}) ended: {upstream[a.path].outcome or upstream[a.path].state.value}"
                    for a in bad) or "a run it waited for can no longer complete"
    dependents.record_never(run.path, [a.run for a in bad] or [a.run for a in afters], why)
    return f"Slurm cancelled it without running: {why}; this run was to start after it completed"
