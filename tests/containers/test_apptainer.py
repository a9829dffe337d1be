"""Jobs whose program runs inside a real apptainer image (SIF), submitted by an ordinary
user, with the supervisor outside the image (scripts/container_lane.sh)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from container_util import profile_text
from survival_util import (TRAIN, Reference, describe, job_field, named, rank_of, rank_pids, resumes_where_it_stopped,
                           slurm, submit, wait_job_gone, wait_until)

pytestmark = pytest.mark.container

PROBE = '''import os, socket
rank = os.environ["RANK"]
path = f"/shared/{os.environ['SLURMD_NODENAME']}-rank{rank}"
with open(path, "w") as f:  # through the profile's bind, as the user
    f.write(f"{os.getuid()} {os.path.exists('/.singularity.d') or os.path.exists('/.apptainer.d')}\\n")
'''


def owned_by_root(folder: Path) -> list[str]:
    return [str(p) for p in [folder, *folder.rglob("*")] if p.lstat().st_uid == 0]


def test_a_users_program_in_the_image_writes_through_each_bind(workdir: Path):
    shared = workdir / "shared"
    shared.mkdir()
    (workdir / "probe.py").write_text(PROBE)
    profile = workdir / "binds.toml"
    profile.write_text(profile_text([f"{shared}:/shared"]))
    runs = workdir / "runs-binds"
    run, job = submit(runs, workdir, ["--profile", str(profile), "--set", "launch.procs_per_node=2"],
                      ["python", "probe.py"])  # 2 nodes x 2 ranks
    assert wait_job_gone(job, run, 180) == "COMPLETED", describe(run)
    got = {p.name: p.read_text().split() for p in shared.iterdir()}
    assert sorted(got) == [f"stnode{n}-rank{r}" for n in (1, 2) for r in (n * 2 - 2, n * 2 - 1)], got
    assert all(uid == str(os.getuid()) and inside == "True" for uid, inside in got.values()), got
    assert owned_by_root(run) == [] and owned_by_root(shared) == []


@pytest.mark.parametrize("launcher", ["srun-loop", "torchrun"])
def test_tiny_demo_in_the_image_stops_on_the_warning_signal_resumes_and_ends_bitwise(workdir: Path, launcher):
    steps = ["--train-steps", "120", "--save-steps", "20"]
    reference = Reference(workdir, TRAIN + steps, f"reference-{launcher}")  # 2 ranks, as the job's 2 nodes x 1
    profile = workdir / f"{launcher}.toml"
    profile.write_text(profile_text([], launcher))
    runs = workdir / f"runs-{launcher}"
    run, job = submit(runs, workdir, ["--profile", str(profile)], TRAIN + steps)
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved"), 240, job)
    slurm("scancel", "--batch", f"--signal={signal.SIGUSR2.name.removeprefix('SIG')}", job)  # the time limit's warning
    wait_until(run, "the requeue", lambda: named(run, "requeue"), 120, job)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    pairs = resumes_where_it_stopped(run)
    assert pairs and all(stopped == resumed for stopped, resumed in pairs), describe(run)
    assert named(run, "stopped"), describe(run)  # the program itself saved and stopped: the signal reached it
    reference.assert_same_weights(run)
    assert owned_by_root(run) == []


STEPS = 60
TRAIN_60 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "10"]


@pytest.fixture(scope="module")
def reference(workdir):
    ref = Reference(workdir, TRAIN_60, "in-job-reference")
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def trainer_ranks(run: Path) -> list[int]:
    """The pids of the run's trainer processes, inside the image (apptainer shares the pid
    namespace: the user sees them, and may signal and trace them)."""
    return rank_pids(run, "slurmtrain.train")


def test_a_killed_rank_in_the_image_is_restarted_in_the_job_and_ends_bitwise(workdir: Path, reference):
    profile = workdir / "in-job.toml"
    profile.write_text(profile_text([], "torchrun"))
    run, job = submit(workdir / "runs-kill", workdir, ["--profile", str(profile)], TRAIN_60)
    wait_until(run, "a checkpoint, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(trainer_ranks(run)) == 2, 240, job)
    os.kill(trainer_ranks(run)[-1], signal.SIGKILL)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert job_field(job, "Restarts") == "0"  # never went back to the queue
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert named(run, "finished")[0]["step"] == STEPS
    reference.assert_same_weights(run)


def test_a_stopped_rank_in_the_image_is_a_hang_named_with_every_stack(workdir: Path, reference):
    """py-spy (the bound Python's) dumps the ranks inside the image from outside it, as the
    user: no ptrace restriction on this machine (no Yama)."""
    profile = workdir / "hang.toml"
    profile.write_text(profile_text([], "srun-loop"))
    run, job = submit(workdir / "runs-hang", workdir, ["--profile", str(profile), "--set",
                                                       "resilience.hang_timeout=20"], TRAIN_60)
    wait_until(run, "a checkpoint, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(trainer_ranks(run)) == 2, 240, job)
    victim = trainer_ranks(run)[-1]
    rank, node = rank_of(victim)
    os.kill(victim, signal.SIGSTOP)
    try:
        wait_until(run, "the hang to be seen", lambda: named(run, "hang"), 60, job)
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    [hang] = named(run, "hang")
    assert rank in hang["ranks"].split() and node in hang["nodes"].split(), (hang, rank, node)
    stacks = sorted(Path(hang["stacks"]).iterdir())
    assert [p.name.split("-")[0] for p in stacks] == ["rank0", "rank1"], stacks
    for p in stacks:
        assert "Thread" in p.read_text(), f"{p.name}: {p.read_text()}"
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    reference.assert_same_weights(run)
    assert owned_by_root(run) == []
