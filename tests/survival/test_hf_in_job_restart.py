"""Restarts inside the job (resilience.restarts_in_job) for a user's Hugging Face Trainer
script (hf_clm.py: slurmtrain's StopCallback and resume line, nothing else) on the
sandbox, as test_in_job_restart.py shows them for the built-in trainer. The callback
reports the Trainer's periodic saves (``checkpoint_saved``) and beats at every step; a rank
SIGKILLed after a save, or SIGSTOPped (a hang: its peer waits in the next all-reduce for
ever), makes the supervisor launch again in the same allocation, ``resume_from`` picks the
newest complete checkpoint, and the run ends with the weights and logged losses of an
uninterrupted run of the same script (one reference run, started once beside the jobs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtrain.runs import classify

import waiting
from survival_util import (HERE, describe, events, job_field, named, rank_of, rank_pids, submit, wait_job_gone,
                           wait_until)

pytestmark = pytest.mark.slurm

SCRIPT = str(HERE / "hf_clm.py")
STEPS, SAVE_STEPS = 30, 10
# Logged every save: a logged loss averages the steps since the last log, and a resumed
# Trainer starts that count at its checkpoint, so only then do the logs compare.
ARGS = ["--max-steps", str(STEPS), "--save-steps", str(SAVE_STEPS), "--logging-steps", str(SAVE_STEPS)]
STEP_SECONDS = "0.5"  # ~10 s from the first save to the end: time to hit a rank mid-run


def hf_command(out: Path) -> list[str]:
    return [sys.executable, SCRIPT, "--output-dir", str(out), *ARGS, "--step-seconds", STEP_SECONDS]


def final_state(out: Path) -> tuple[dict, list[tuple]]:
    """The last checkpoint's weights and the (step, loss, grad_norm) the Trainer logged."""
    from safetensors.torch import load_file

    folder = out / f"checkpoint-{STEPS}"
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS, state
    logged = [(e["step"], e["loss"], e.get("grad_norm")) for e in state["log_history"] if "loss" in e]
    return load_file(str(folder / "model.safetensors")), logged


class Reference:
    """The uninterrupted run of the script (2 ranks, torchrun on this machine; the jobs run
    2 nodes x 1 rank: the same world, the same all-reduces), started once for the module."""

    def __init__(self, workdir: Path):
        self.dir = workdir / "hf-in-job-restart-reference"
        self.dir.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             SCRIPT, "--output-dir", str(self.dir / "out"), *ARGS],
            cwd=workdir, env={**os.environ, "OMP_NUM_THREADS": "1", "SLURMTRAIN_RUN_DIR": str(self.dir)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = ""

    def assert_same(self, out: Path, run: Path) -> None:
        if self.proc.returncode is None:  # the first caller waits for it
            _, self.err = waiting.communicate(self.proc, "the uninterrupted reference run", [self.dir])
        assert self.proc.returncode == 0, self.err[-3000:]
        (got, got_log), (want, want_log) = final_state(out), final_state(self.dir / "out")
        assert got.keys() == want.keys()
        different = [k for k in want if not (got[k].dtype == want[k].dtype and got[k].equal(want[k]))]
        assert not different, f"weights differ from the uninterrupted run: {different}\n{describe(run)}"
        assert len(want_log) == STEPS // SAVE_STEPS and got_log == want_log, (got_log, want_log)


@pytest.fixture(scope="module")
def reference(workdir):
    ref = Reference(workdir)
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def ranks(run: Path) -> list[int]:
    return rank_pids(run, SCRIPT)


def steps_run(run: Path) -> list[dict]:
    path = run / "hf_steps.jsonl"  # rank 0's line per finished step (hf_clm.py)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_resumed_from_the_newest_save(run: Path) -> int:
    """The one relaunch resumed from the last checkpoint reported before it (the newest
    complete one), in the same job start, and ran every step after it once."""
    evs = events(run)
    at = next(i for i, e in enumerate(evs) if e["event"] == "relaunched")
    saved = [e["step"] for e in evs[:at] if e["event"] == "checkpoint_saved"]
    resumed = [e["step"] for e in evs[at:] if e["event"] == "resumed"]
    assert saved and resumed == [saved[-1]], describe(run)
    steps = steps_run(run)
    assert {s["job_restart"] for s in steps} == {"0"}, steps  # never requeued
    after = [s["step"] for s in steps][-(STEPS - resumed[0]):]
    assert after == list(range(resumed[0] + 1, STEPS + 1)), steps
    return resumed[0]


def test_hf_trainer_killed_rank_is_restarted_in_the_job_from_its_newest_save_and_ends_bitwise(
        workdir, runs_dir, reference):
    out = runs_dir / "hf-out"
    run, job = submit(runs_dir, workdir, ["--name", "hf-rankkill"], hf_command(out))
    wait_until(run, "a periodic save, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(ranks(run)) == 2, 240, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    os.kill(ranks(run)[-1], signal.SIGKILL)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    assert job_field(job, "Restarts") == "0"  # never went back to the queue
    assert len(named(run, "started")) == 1 and [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert assert_resumed_from_the_newest_save(run) >= saved
    assert named(run, "finished")[0]["step"] == STEPS
    assert [o.kind for o in classify.ends(run)] == [classify.COMPLETED], describe(run)
    assert any("started again in the job" in line for line in classify.history(run))
    reference.assert_same(out, run)


def test_hf_trainer_stopped_rank_is_a_hang_named_with_every_stack_and_restarted_in_the_job(
        workdir, runs_dir, reference):
    """SIGSTOP: the rank neither fails nor beats; its peer blocks in the callback's next
    all-reduce. The hang is seen within hang_timeout + 15 s, every rank's stack is recorded,
    the stopped rank and its node are named, and the launch starts again in the job."""
    out, timeout = runs_dir / "hf-out", 20
    run, job = submit(runs_dir, workdir, ["--name", "hf-hang", "--set", f"resilience.hang_timeout={timeout}"],
                      hf_command(out))
    wait_until(run, "a periodic save, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(ranks(run)) == 2, 240, job)
    victim = ranks(run)[-1]
    rank, node = rank_of(victim)
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.time()
    try:
        wait_until(run, "the hang to be seen", lambda: named(run, "hang"), 60, job)
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    [hang] = named(run, "hang")
    assert hang["seconds"] <= timeout + 15, hang  # counted by the supervisor from the last heartbeat
    assert hang["time"] - stopped_at <= timeout + 15, (hang, stopped_at)  # and as the test sees it
    assert rank in hang["ranks"].split() and node in hang["nodes"].split(), (hang, rank, node)
    stacks = sorted(Path(hang["stacks"]).iterdir())
    assert Path(hang["stacks"]).parent == run / "stacks", hang
    assert [p.name.split("-")[0] for p in stacks] == ["rank0", "rank1"], stacks
    for p in stacks:
        assert "Thread" in p.read_text(), f"{p.name}: {p.read_text()}"
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert job_field(job, "Restarts") == "0"
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert_resumed_from_the_newest_save(run)
    assert named(run, "finished")[0]["step"] == STEPS
    assert any(line.endswith(f"stacks in {hang['stacks']}") for line in classify.history(run))
    reference.assert_same(out, run)
