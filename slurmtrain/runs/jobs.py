"""submitit's executor and job objects, adapted to our own scripts and to clusters
without accounting. This module imports submitit: import it inside CLI commands only.

Submission hook. submitit's ``Executor._submit_command(command)`` writes
``_make_submission_file_text(command, uid)`` to a file, runs
``_make_submission_command(path)`` (its ``CommandFunction``: sbatch's stderr in the
error), reads the job id with ``_get_job_id_from_submission_command`` and returns a
``SlurmJob``. We keep that path and override the two ``_make_*`` hooks: the file text
is our rendered script rather than submitit's pickled-function wrapper, and the command
submits ``<run_dir>/job.sbatch`` itself, so the file the user reads is the file sbatch
got. ``CommandFunction`` has no timeout, so the command runs under coreutils
``timeout``. ``submit(fn)`` (pickling) is never used.

Tracking. ``SlurmJob.watcher`` asks only ``sacct``, which without accounting storage
answers nothing, so every job reads UNKNOWN (submitit issue 1720); it also swallows
errors. :class:`Watcher` keeps submitit's design (every registered job refreshed by one
query) but asks :func:`slurmquery.query`.

These are submitit's private names, so setup.cfg pins submitit to the releases that
tests/runs/test_submitit_contract.py passed on; that test names whichever hook or
watcher attribute a new release renamed or reshaped.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError
from submitit.slurm.slurm import SlurmInfoWatcher

from ..errors import SlurmError
from . import slurmquery
from .slurmquery import JobInfo

SBATCH_TIMEOUT_S = 60
SUBMITIT_DIR = ".submitit"  # submitit's own bookkeeping inside a run directory


class Watcher(SlurmInfoWatcher):
    """submitit's watcher with one :func:`slurmquery.query` per refresh instead of sacct."""

    def __init__(self, delay_s: int = 60) -> None:
        super().__init__(delay_s=delay_s)
        self.job_infos: dict[str, JobInfo] = {}
        self.since: float | None = None  # before every registered job was submitted (slurmquery.query)

    def update(self, ids: list[str] | None = None) -> None:
        """``ids`` (default: every registered job), each time: submitit leaves out a job once
        its state is none of its few running ones, and keeps the answer for good, but a job
        of ours comes back: requeued (after a stop, by an administrator, by Slurm after a
        preemption) or shown SIGNALING (Slurm 24.11) on its way. A process that polls
        (`watch`, `resubmit --watch`) kept a stale answer (its restart count, its state) for
        the rest of the run."""
        to_check = sorted({x.split("_")[0] for x in (self._registered if ids is None else ids)})
        if not to_check:
            return
        self._num_calls += 1
        infos = slurmquery.query(to_check, self.since)  # raises SlurmError, unlike submitit's sacct call
        for job_id in to_check:  # one Slurm has forgotten since: no stale answer in its place
            self.job_infos.pop(job_id, None)
            self._info_dict.pop(job_id, None)
        self.job_infos.update(infos)
        self._info_dict.update({j: {"State": i.raw_state or i.state.value, "NodeList": i.nodelist or ""}
                                for j, i in infos.items()})
        self._last_status_check = time.time()


class TrackedJob(submitit.SlurmJob):
    """A ``SlurmJob`` that reads states without accounting, and whose cancel sticks
    (see :func:`slurmquery.cancel`) and has a timeout."""

    watcher = Watcher(delay_s=60)

    def info(self, mode: str = "standard") -> JobInfo | None:
        """What Slurm says about this job; None when Slurm no longer knows it."""
        self.watcher.get_info(self.job_id, mode=mode)
        return self.watcher.job_infos.get(self.job_id)

    def cancel(self, check: bool = True) -> None:
        try:
            slurmquery.cancel(self.job_id)
        except SlurmError:
            if check:
                raise


def job(run_dir: str | Path, job_id: str) -> TrackedJob:
    return TrackedJob(folder=Path(run_dir) / SUBMITIT_DIR, job_id=str(job_id))


def refresh(jobs: list[TrackedJob], since: float | None = None) -> None:
    """One query to Slurm for all ``jobs`` (they share the class's watcher), submitted
    after ``since`` where it is known."""
    if jobs:
        TrackedJob.watcher.since = since
        TrackedJob.watcher.update([j.job_id for j in jobs])  # not every job this process asked about before


class ScriptExecutor(submitit.SlurmExecutor):
    """Submits one rendered sbatch script, unchanged, through submitit (see the module doc)."""

    job_class = TrackedJob

    def __init__(self, run_dir: str | Path, script: str | Path, sbatch_args: tuple[str, ...] = ()):
        try:
            super().__init__(folder=Path(run_dir) / SUBMITIT_DIR)
        except RuntimeError:  # submitit's "Could not detect srun"
            raise SlurmError("srun: command not found; slurmtrain needs the Slurm client commands: "
                             "run it on a login node, or start the sandbox (`slurmtrain sandbox up`)") from None
        self.script = Path(script)
        self.sbatch_args = tuple(sbatch_args)  # e.g. --exclude on a resubmit: overrides the #SBATCH line
        self.folder.mkdir(parents=True, exist_ok=True)  # _submit_command writes its file here

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return self.script.read_text()

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        return ["timeout", "--kill-after=5", str(SBATCH_TIMEOUT_S), "sbatch", *self.sbatch_args, str(self.script)]

    def _num_tasks(self) -> int:
        return 1  # one batch script; its tasks are ours to track, not submitit's

    def submit_script(self) -> TrackedJob:
        """sbatch the script; Slurm's refusal becomes a one-line :class:`SlurmError`."""
        stderr = io.StringIO()
        try:
            # CommandFunction prints sbatch's stderr itself on failure; keep it for our message.
            with contextlib.redirect_stderr(stderr):
                return self._submit_command("")
        except FailedJobError as err:
            cause = err.__cause__
            code = getattr(cause, "returncode", None)
            if code in (124, 137):
                raise SlurmError(f"sbatch did not answer within {SBATCH_TIMEOUT_S} s: is the Slurm "
                                 "controller reachable?") from None
            raise SlurmError(slurmquery.one_line(str(err) or stderr.getvalue())) from None
        except FileNotFoundError as err:  # coreutils `timeout` itself is missing
            raise SlurmError(f"{err.filename}: command not found") from None
