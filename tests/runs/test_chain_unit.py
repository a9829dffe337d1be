"""Chains without Slurm: the sbatch options a chain adds, what status says of a waiting job,
the `gen` line a chained submit records, and refusals that need no job to exist."""

from __future__ import annotations

import pytest

from slurmtrain.cli.submit import _without_runs_dir
from slurmtrain.errors import UsageError
from slurmtrain.runs import chain, rundir


def test_every_dependency_must_hold_and_one_that_cannot_cancels_the_job():
    afters = [chain.After("afterok", "tok", "/r/tok", "12"), chain.After("afterany", "eval", "/r/eval", "15")]
    assert chain.sbatch_args(afters) == ("--dependency=afterok:12,afterany:15", "--kill-on-invalid-dep=yes")
    assert chain.sbatch_args([]) == ()


def test_status_says_what_a_held_job_waits_for():
    afters = [chain.After("afterok", "tok", "/r/tok", "12"), chain.After("afterany", "eval", "/r/eval", "15")]
    assert chain.waiting_note(afters, "Dependency") == "waits until tok (job 12) completes and eval (job 15) ends"
    assert chain.waiting_note(afters, "Resources") is None  # held for nodes, not for the chain
    assert chain.waiting_note([], "Dependency") is None
    # sacct shows a pending job's reason only once it starts: not known is not "not held"
    assert chain.waiting_note(afters, None) == "waits until tok (job 12) completes and eval (job 15) ends"


def test_the_gen_line_of_a_chained_submit_leaves_the_chain_out():
    argv = ["--after", "tok", "-N", "2", "--after-any=x", "--after-ok", "y", "--runs-dir", "r", "--", "python",
            "--after", "z"]
    assert _without_runs_dir(argv) == ["-N", "2", "--", "python", "--after", "z"]


def status_of(run):
    """What the CLI gives chain.resolve: the run's status with its events."""
    from slurmtrain.runs import track
    return track.statuses([run], with_events=True)[0]


def test_a_run_never_queued_or_unknown_cannot_be_waited_for(tmp_path):
    run = rundir.create(tmp_path, "draft")
    run.update_manifest(job_name="draft", state="created", job_ids=[])
    with pytest.raises(UsageError, match=rf"--after-any {run.name}: run {run.name} has no job \(it was never queued"):
        chain.resolve([("after_any", run.name)], tmp_path, status_of)
    with pytest.raises(UsageError, match="--after nope: run 'nope': no such run directory"):
        chain.resolve([("after", "nope")], tmp_path, status_of)
