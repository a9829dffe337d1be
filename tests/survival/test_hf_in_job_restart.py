"""Restarts inside the job (resilience.restarts_in_job) for a user's Hugging Face Trainer
script (hf_clm.py: slurmtrain's StopCallback and resume line, nothing else) on the
sandbox, as test_four_faults_e2e.py and the container lane show them for the built-in
trainer. The callback reports the Trainer's periodic saves (``checkpoint_saved``) and beats
at every step; a rank SIGKILLed after a save, then one SIGSTOPped (a hang: its peer waits in
the next all-reduce for ever), each make the supervisor launch again in the same
allocation, ``resume_from`` picks the newest complete checkpoint, and the run ends with the
weights and logged losses of an uninterrupted run of the same script (started beside it).
One run meets both faults: an HF start costs more than the faults' checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain.runs import classify

import waiting
from survival_util import (HERE, TORCHRUN, describe, events, job_field, named, rank_of, rank_pids, stop_until_hang,
                           submit, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

SCRIPT = str(HERE / "hf_clm.py")
STEPS, SAVE_STEPS = 40, 10
# Logged every save: a logged loss averages the steps since the last log, and a resumed
# Trainer starts that count at its checkpoint, so only then do the logs compare.
ARGS = ["--max-steps", str(STEPS), "--save-steps", str(SAVE_STEPS), "--logging-steps", str(SAVE_STEPS)]
STEP_SECONDS = "0.5"  # 5 s between saves, 10 s after the relaunch's first: time to hit a rank mid-run


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
        # The baseline is plain torchrun, not slurmtrain: a worker that aborted in its teardown
        # after the last save (gloo's threads: "terminate called without an active exception",
        # seen in local CI runs even after destroy_process_group) still left a whole
        # run behind; final_state checks that it saved its last step. Anything else fails.
        torn_down = "terminate called without an active exception" in self.err and \
            (self.dir / "out" / f"checkpoint-{STEPS}" / "trainer_state.json").is_file()
        assert self.proc.returncode == 0 or torn_down, self.err[-3000:]
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


def assert_each_relaunch_resumed_from_the_newest_save(run: Path) -> list[int]:
    """Each relaunch resumed from the last checkpoint reported before it (the newest complete
    one), in the same job start, and the last ran every step after it once; the steps
    resumed from."""
    evs = events(run)
    at = [i for i, e in enumerate(evs) if e["event"] == "relaunched"] + [len(evs)]
    resumed_at = []
    for i, j in zip(at, at[1:]):
        saved = [e["step"] for e in evs[:i] if e["event"] == "checkpoint_saved"]
        resumed = [e["step"] for e in evs[i:j] if e["event"] == "resumed"]
        assert saved and resumed == [saved[-1]], describe(run)
        resumed_at.append(resumed[0])
    steps = steps_run(run)
    assert {s["job_restart"] for s in steps} == {"0"}, steps  # never requeued
    after = [s["step"] for s in steps][-(STEPS - resumed_at[-1]):]
    assert after == list(range(resumed_at[-1] + 1, STEPS + 1)), steps
    return resumed_at


def saved_since_relaunch(run: Path, k: int) -> bool:
    """A periodic save after the k-th relaunch (the run trains again after that fault)."""
    evs = [e["event"] for e in events(run)]
    marks = [i for i, e in enumerate(evs) if e == "relaunched"]
    return len(marks) >= k and "checkpoint_saved" in evs[marks[k - 1] + 1:]


def test_hf_trainer_killed_then_stopped_rank_each_restarted_in_the_job_from_its_newest_save_and_ends_bitwise(
        workdir, runs_dir, reference):
    """One run, two faults. A rank SIGKILLed after a periodic save (a crash). Then, once the
    relaunch has saved again, a rank on the other node SIGSTOPped: it neither fails nor beats, and its peer
    blocks in the callback's next all-reduce; the hang is seen within hang_timeout + 15 s,
    every rank's stack is recorded, the stopped rank and its node are named. Each time the
    launch starts again in the job from the newest save."""
    out, timeout = runs_dir / "hf-out", 20
    run, job = submit(runs_dir, workdir, [*TORCHRUN, "--name", "hf-faults",
                                          "--set", f"resilience.hang_timeout={timeout}"],
                      hf_command(out))
    both = lambda: len(ranks(run)) == 2  # noqa: E731
    wait_until(run, "a periodic save, and both ranks running", lambda: named(run, "checkpoint_saved") and both(),
               240, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    _, crashed_on = rank_of(ranks(run)[-1])
    os.kill(ranks(run)[-1], signal.SIGKILL)                                                  # 1. a crash
    wait_until(run, "a save after the relaunch, and both ranks running",
               lambda: saved_since_relaunch(run, 1) and both(), 240, job)
    # 2. a hang, on the other node: a node whose ranks fail first or hang twice in a job start is left out
    victim = next(pid for pid in ranks(run) if rank_of(pid)[1] != crashed_on)
    rank, node = rank_of(victim)
    stopped_at = stop_until_hang(run, victim, job, 60)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    assert job_field(job, "Restarts") == "0"  # never went back to the queue
    assert len(named(run, "started")) == 1 and [e["attempt"] for e in named(run, "relaunched")] == [1, 2], describe(run)
    first, _ = assert_each_relaunch_resumed_from_the_newest_save(run)
    assert first >= saved
    [hang] = named(run, "hang")
    assert hang["seconds"] <= timeout + 15, hang  # counted by the supervisor from the last heartbeat
    assert hang["time"] - stopped_at <= timeout + 15, (hang, stopped_at)  # and as the test sees it
    assert rank in hang["ranks"].split() and node in hang["nodes"].split(), (hang, rank, node)
    # its peer stopped beating with it (it waits in the next all-reduce): the stacks tell them apart
    assert (hang.get("stuck_ranks"), hang.get("stuck_nodes")) == (rank, node), hang
    assert hang["why"].startswith("process state T"), hang
    stacks = sorted(Path(hang["stacks"]).iterdir())
    assert Path(hang["stacks"]).parent == run / "stacks", hang
    assert [p.name.split("-")[0] for p in stacks] == ["rank0", "rank1"], stacks
    for p in stacks:
        assert "Thread" in p.read_text(), f"{p.name}: {p.read_text()}"
    assert named(run, "finished")[0]["step"] == STEPS
    assert [o.kind for o in classify.ends(run)] == [classify.COMPLETED], describe(run)
    history = classify.history(run)
    assert any("started again in the job" in line for line in history)
    assert any(line.endswith(f"stacks in {hang['stacks']}") for line in history)
    reference.assert_same(out, run)
