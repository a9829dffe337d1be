"""Survival of users' own programs on a real Slurm (the sandbox).

- A Hugging Face Trainer script (tiny random Llama, tokenizer trained locally) with
  slurmtrain's callback, 2 nodes x 2 processes through the srun launcher: a preemption and
  then a time-limit warning each stop it with a checkpoint, the job requeues, and the
  Trainer's global step carries on. (Through torchrun, in an apptainer image: the
  container lane's tests/containers/test_workflows.py.)
- A plain program with no handler: stopped at the warning, not requeued (it saved nothing);
  killed by the stop signal itself (srun's task, torchrun's workers): told it had no handler yet; one that
  saves on the signal and exits 0: completed, and told how a stop is requeued.
- A program that starts over after a requeue (its state in a file per start): warned of,
  naming the checkpoint it did not resume from.
- A program whose checkpoint takes 40 s: test_survival.py, preempted together with the
  other program of the user's own there.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

from slurmtrain.runs import classify

from survival_util import (HERE, TORCHRUN, describe, hf_steps, job_field, named, run_cli, slurm, submit,
                           take_all_nodes, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

# Room after the preemption for the resumed run to step on and be asked to stop
# (0.3 s a step, slower beside other work).
HF_STEPS = 100


def ask_to_stop(job: str) -> None:
    """The stop signal to the batch shell by hand (--signal=B:USR2@... is what Slurm sends
    before the time limit), long before the limit: a stop someone asked for, which the run
    meets as it meets the time limit's (that one, sent by Slurm on time: the Slurm-version
    tests, tests/e2e/test_slurm_versions.py)."""
    slurm("scancel", "--batch", "--signal=USR2", job)


def test_hugging_face_trainer_survives_preemption_and_a_stop_asked_for(workdir, runs_dir):
    out = runs_dir / "hf-srun"
    # One rank a node (a world of two across the nodes): each of its three starts imports
    # transformers on every rank, and two more ranks showed nothing more.
    run, job = submit(runs_dir, workdir, ["--partition", "low", "--launcher", "srun", "--name", "hf-srun",
                                          "--set", "launch.procs_per_node=1", "--set", "launch.rdzv_port=29761"],
                      [sys.executable, str(HERE / "hf_clm.py"), "--output-dir", str(out), "--max-steps",
                       str(HF_STEPS), "--save-steps", "1000", "--step-seconds", "0.3"])
    wait_until(run, "the Trainer stepping", lambda: len(hf_steps(run)) >= 8, 300, job)
    take_all_nodes(5)  # preempts it (partition low)
    wait_until(run, "resumed and stepping again", lambda: named(run, "resumed") and
               hf_steps(run)[-1]["step"] >= named(run, "resumed")[0]["step"] + 5, 300, job)
    ask_to_stop(job)
    assert wait_job_gone(job, run, 600) == "COMPLETED", describe(run)

    kinds = [o.kind for o in classify.ends(run)]
    assert kinds == [classify.PREEMPTED, classify.ASKED, classify.COMPLETED], describe(run)
    stopped, resumed = named(run, "stopped"), named(run, "resumed")
    assert len(stopped) == len(resumed) == 2, describe(run)
    # the Trainer's global step carries on from each stop's checkpoint
    assert [e["step"] for e in resumed] == [e["step"] for e in stopped], describe(run)
    # every step ran exactly once: nothing redone, nothing skipped
    counts = Counter(r["step"] for r in hf_steps(run))
    assert sorted(counts) == list(range(1, HF_STEPS + 1)) and set(counts.values()) == {1}, \
        ([s for s, n in counts.items() if n > 1], describe(run))
    state = json.loads((out / f"checkpoint-{HF_STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == HF_STEPS


def test_a_program_without_a_handler_is_stopped_and_not_requeued(workdir, runs_dir):
    # Says it is running (a file per rank), then loops; nothing else: no handler, no checkpoint.
    loop = ("import os, time\n"
            "open(os.path.join(os.environ['SLURMTRAIN_RUN_DIR'], 'running-' + os.environ['RANK']), 'w').close()\n"
            "for i in range(900): time.sleep(1)")
    run, job = submit(runs_dir, workdir, ["--name", "plain", "--set", "launch.rdzv_port=29762"],
                      ["python3", "-c", loop])
    wait_until(run, "both ranks to run", lambda: len(list(run.glob("running-*"))) == 2, 180, job)
    ask_to_stop(job)
    assert wait_job_gone(job, run, 180) == "FAILED", describe(run)
    assert named(run, "signal") and named(run, "stop_unsaved"), describe(run)
    assert not named(run, "requeue") and not named(run, "stop_timeout"), describe(run)  # stopped at once
    assert job_field(job, "Restarts") == "0"
    (outcome,) = classify.ends(run)
    assert outcome.kind == classify.STOPPED_UNSAVED, outcome
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir, check=False).stdout
    # The srun launcher: the task died of USR2 itself (exit 140), which status names.
    assert "the program (or a shell in front of it) was killed by SIGUSR2, the stop signal (exit status 140): it had no handler for it" in \
        status and "not requeued" in status, status


def test_a_program_that_saves_on_the_signal_and_exits_0_is_told_how_to_be_requeued(workdir, runs_dir):
    """The habit of a handler that saves and exits 0 (no slurmtrain.stop): it finished, or
    stopped early; it read as plainly "completed". Still completed (it may have finished), but
    the batch log and status say that exit 75 after reporting is how a stop is requeued."""
    graceful = ("import os, signal, sys, time\n"
                "def leave(*_): sys.exit(0)  # 'saved', gone\n"
                "for s in (signal.SIGUSR2, signal.SIGTERM): signal.signal(s, leave)\n"
                "open(os.path.join(os.environ['SLURMTRAIN_RUN_DIR'], 'running-' + os.environ['RANK']), 'w').close()\n"
                "for i in range(900): time.sleep(1)")
    run, job = submit(runs_dir, workdir, ["--name", "graceful", "--launcher", "srun", "--set",
                                          "launch.rdzv_port=29766"], ["python3", "-c", graceful])
    wait_until(run, "both ranks to run", lambda: len(list(run.glob("running-*"))) == 2, 180, job)
    ask_to_stop(job)
    assert wait_job_gone(job, run, 180) == "COMPLETED", describe(run)
    assert [e.get("after_stop") for e in named(run, "finished")] == [True], describe(run)
    (outcome,) = classify.ends(run)
    assert outcome.kind == classify.COMPLETED and "exited 0 after the stop request, taken as finished" in \
        outcome.detail, outcome
    batch = next(run.glob("logs/job-*.out")).read_text()
    assert "the command exited 0 after the stop request: taken as finished; a program that stops early" in batch, batch


def test_a_program_that_ignores_every_stop_gets_sigterm_then_sigkill(workdir, runs_dir):
    """stop_timeout runs out: SIGTERM to the tasks, then SIGKILL after the grace (srun
    launcher: no agent in between that would end the workers on its own)."""
    deaf = ("import os, signal, time\n"
            "for s in (signal.SIGUSR2, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\n"
            "open(os.path.join(os.environ['SLURMTRAIN_RUN_DIR'], 'running-' + os.environ['RANK']), 'w').close()\n"
            "for i in range(900): time.sleep(1)")
    run, job = submit(runs_dir, workdir, ["--name", "deaf", "--launcher", "srun", "--set", "launch.rdzv_port=29764",
                                          "--set", "resilience.stop_timeout=5"], ["python3", "-c", deaf])
    wait_until(run, "both ranks to run", lambda: len(list(run.glob("running-*"))) == 2, 180, job)
    ask_to_stop(job)
    assert wait_job_gone(job, run, 180) == "FAILED", describe(run)
    (timeout,), (escalated,) = named(run, "stop_timeout"), named(run, "stop_escalated")
    signalled = named(run, "signal")[0]["time"]
    assert 5 <= timeout["time"] - signalled < 15, describe(run)
    assert 15 <= escalated["time"] - timeout["time"] < 30, describe(run)
    assert named(run, "stop_unsaved") and not named(run, "requeue"), describe(run)


def test_workers_killed_by_the_stop_signal_under_torchrun_are_told_they_had_no_handler_yet(workdir, runs_dir):
    """Still importing when the stop came, under torchrun: the workers die of USR2, the job
    script's agent says so in one line and exits 140 (not torchrun's traceback and 1), and the
    outcome names the signal and says to set the handler up first, not "report checkpoints"."""
    late = ("import os, time\n"
            "open(os.path.join(os.environ['SLURMTRAIN_RUN_DIR'], 'running-' + os.environ['RANK']), 'w').close()\n"
            "time.sleep(900)  # heavy imports; slurmtrain.stop.install() would come after\n")
    run, job = submit(runs_dir, workdir, ["--name", "late", *TORCHRUN, "--set", "launch.rdzv_port=29767"],
                      ["python3", "-c", late])
    wait_until(run, "both ranks to run", lambda: len(list(run.glob("running-*"))) == 2, 180, job)
    ask_to_stop(job)
    assert wait_job_gone(job, run, 180) == "FAILED", describe(run)
    assert [e.get("signal") for e in named(run, "stop_unsaved")] == ["USR2"], describe(run)
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir, check=False).stdout
    assert "killed by SIGUSR2, the stop signal (exit status 140): it had no handler for it" in status, status
    batch = next(run.glob("logs/job-*.out")).read_text()
    assert "before heavy imports and data loading" in batch, batch
    node_logs = "".join(p.read_text() for p in run.glob("logs/*-stnode*.out"))
    assert "the workers were killed by SIGUSR2, the stop signal: no handler for it yet" in node_logs, node_logs
    assert "ChildFailedError" not in node_logs, node_logs


def test_a_requeued_program_that_starts_over_is_warned_of_with_its_checkpoint(workdir, runs_dir):
    """Its state in a file per start (as Lightning's log folder is per job id): after the
    stop and requeue it starts from step 1 though the run saved more. The batch log, the
    events and status say so, naming the checkpoint it did not resume from."""
    counter = HERE.parent / "e2e" / "counter.py"
    run, job = submit(runs_dir, workdir, ["--name", "over", "--launcher", "srun", "-N", "1",
                                          "--set", "launch.procs_per_node=1"],
                      [sys.executable, str(counter), "40", "0.2", "5", "counter-{SLURM_RESTART_COUNT}.json"])
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved"), 180, job)
    ask_to_stop(job)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    stopped = named(run, "stopped")[0]["step"]
    [behind] = named(run, "resumed_behind")
    assert (behind["step"], behind["saved"]) == (1, stopped), describe(run)
    assert behind["path"].endswith("counter-0.json"), behind
    batch = "".join(p.read_text() for p in run.glob("logs/job-*.out"))
    assert f"the program's first step in this launch is 1, but the run saved step {stopped}" in batch, batch
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir, check=False).stdout
    assert f"began at step 1, below the checkpoint of step {stopped}" in status, status
    got = json.loads(run_cli(["status", "--json", "--runs-dir", str(runs_dir), run.name], cwd=workdir).stdout)
    got = got[0] if isinstance(got, list) else got
    [again] = [f for f in got["goodput"]["faults"] if f["kind"] == "trained again"]
    assert again["cost"].get("lost", 0) > 0, got["goodput"]  # the steps run twice are not counted as trained
