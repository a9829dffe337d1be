"""Jobs whose program runs inside a real apptainer image (SIF), submitted by an ordinary
user, with the supervisor outside the image (scripts/container_lane.sh)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from container_util import owned_by_root, profile_text
from slurmtrain.runs import classify
from survival_util import (TRAIN, describe, events, named, rank_of, rank_pids, resumes_where_it_stopped,
                           shared_reference, stop_until_hang, submit, take_all_nodes, wait_job_gone, wait_until)

pytestmark = pytest.mark.container

# A user's wrapper: it checks its mounts (a file through each bind named before "--", as the
# user), then becomes the built-in trainer with the arguments after it.
PROBE = '''import os, sys
split = sys.argv.index("--")
for folder in sys.argv[1:split]:
    with open(f"{folder}/{os.environ['SLURMD_NODENAME']}-rank{os.environ['RANK']}", "w") as f:
        f.write(f"{os.getuid()} {os.path.exists('/.singularity.d') or os.path.exists('/.apptainer.d')}\\n")
os.execv(sys.executable, [sys.executable, "-m", "slurmtrain.train", *sys.argv[split + 1:]])
'''


def test_tiny_demo_on_2_nodes_x_2_ranks_in_the_image_writes_through_each_bind_and_completes(workdir: Path):
    binds = {"/shared": workdir / "shared", "/scratch/out": workdir / "scratch"}
    for folder in binds.values():
        folder.mkdir()
    (workdir / "probe.py").write_text(PROBE)
    profile = workdir / "binds.toml"
    profile.write_text(profile_text([f"{host}:{inside}" for inside, host in binds.items()]))
    runs = workdir / "runs-binds"
    run, job = submit(runs, workdir, ["--profile", str(profile), "--set", "launch.procs_per_node=2"],
                      ["python", "probe.py", *binds, "--", *TRAIN[3:], "--train-steps", "20",  # 2 nodes x 2 ranks
                       "--set", "train.micro_batch_size=2"])
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert named(run, "finished")[0]["step"] == 20, describe(run)
    log = "".join(p.read_text() for p in (run / "logs").glob("*.out"))
    assert "world size 4" in log, log[-3000:]
    ranks = [f"stnode{n}-rank{r}" for n in (1, 2) for r in (n * 2 - 2, n * 2 - 1)]
    for inside, host in binds.items():
        got = {p.name: p.read_text().split() for p in host.iterdir()}
        assert sorted(got) == ranks, (inside, got)
        assert all(uid == str(os.getuid()) and image == "True" for uid, image in got.values()), (inside, got)
        assert owned_by_root(host) == []
    assert owned_by_root(run) == []


# One uninterrupted reference for every trainer job of the module; room after the first
# checkpoint for the other job of a pair to reach its own (the lane runs beside the suite:
# a start takes 40-110 s there, a step up to a second).
STEPS = 100
TRAIN_100 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "10"]
ONE_CPU = ["--set", "slurm.cpus_per_task=1"]  # two jobs at once on the sandbox's 4-CPU nodes
# The faulted jobs' steps paced at 1 s (a sleep: the weights stay the reference's): on a fast
# machine the killed job trained its 100 steps at 3 a second while the other one's hang was
# being found, and finished before the preemption meant for it.
PACED = ["--set", "debug.step_seconds=1"]


@pytest.fixture(scope="module")
def reference(workdir):
    yield from shared_reference(workdir, TRAIN_100, "reference")


def submit_pair(workdir: Path, jobs: dict[str, tuple[str, list[str]]]) -> dict[str, tuple[Path, str]]:
    """Submit the trainer jobs (name -> launcher, more options) at once and wait until each
    has a checkpoint (and both its ranks running); name -> (run directory, job id)."""
    out = {}
    for name, (launcher, options) in jobs.items():
        profile = workdir / f"{name}.toml"
        profile.write_text(profile_text([], launcher))
        out[name] = submit(workdir / f"runs-{name}", workdir, ["--profile", str(profile), *ONE_CPU, *options],
                           TRAIN_100 + PACED)
    for name, (run, job) in out.items():
        wait_until(run, f"{name}: a checkpoint, and both ranks running",
                   lambda: named(run, "checkpoint_saved") and len(trainer_ranks(run)) == 2, 300, job)
        assert named(run, "checkpoint_saved")[-1]["step"] < STEPS, f"{name} ended before the fault: {describe(run)}"
    return out


def trainer_ranks(run: Path) -> list[int]:
    """The pids of the run's trainer processes, inside the image (apptainer shares the pid
    namespace: the user sees them, and may signal and trace them)."""
    return rank_pids(run, "slurmtrain.train")


def saved_since_relaunch(run: Path) -> bool:
    evs = [e["event"] for e in events(run)]
    return "relaunched" in evs and "checkpoint_saved" in evs[evs.index("relaunched") + 1:]


@pytest.fixture(scope="module")
def faults(workdir):
    """Two jobs at once, each meeting two faults: one rank SIGKILLed in a torchrun job, one
    rank SIGSTOPped in a srun-loop job (a hang: its heartbeats stop); once both trained
    again after their restart in the job, a job of the high partition preempts both."""
    jobs = submit_pair(workdir, {"torchrun": ("torchrun", []),
                                 "srun-loop": ("srun-loop", ["--set", "resilience.hang_timeout=20"])})
    (kill_run, _), (hang_run, hang_job) = jobs["torchrun"], jobs["srun-loop"]
    os.kill(trainer_ranks(kill_run)[-1], signal.SIGKILL)
    victim = trainer_ranks(hang_run)[-1]
    rank, node = rank_of(victim)
    stop_until_hang(hang_run, victim, hang_job, 90)
    for run, job in jobs.values():
        wait_until(run, "training again after the restart in the job",
                   lambda run=run: saved_since_relaunch(run) and len(trainer_ranks(run)) == 2, 300, job)
        assert not named(run, "finished"), f"ended before the preemption: {describe(run)}"
    take_all_nodes(5)
    states = {name: wait_job_gone(job, run, 400) for name, (run, job) in jobs.items()}
    return jobs, states, (rank, node)


@pytest.mark.parametrize("launcher", ["srun-loop", "torchrun"])
def test_tiny_demo_in_the_image_is_preempted_requeued_and_resumes_bitwise(faults, reference, launcher):
    jobs, states, _ = faults
    run, _ = jobs[launcher]
    assert states[launcher] == "COMPLETED", describe(run)
    assert [o.kind for o in classify.ends(run)] == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    pairs = resumes_where_it_stopped(run)
    assert pairs and all(stopped == resumed for stopped, resumed in pairs), describe(run)
    assert named(run, "stopped"), describe(run)  # the program itself saved and stopped: the signal reached it
    reference.assert_same_weights(run)
    assert owned_by_root(run) == []


def test_a_killed_rank_in_the_image_is_restarted_in_the_job_and_ends_bitwise(faults, reference):
    jobs, states, _ = faults
    run, _ = jobs["torchrun"]
    assert states["torchrun"] == "COMPLETED", describe(run)
    kinds = [e["event"] for e in events(run)]
    assert kinds.index("relaunched") < kinds.index("stopped"), kinds  # in the job, before the preemption
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert named(run, "finished")[0]["step"] == STEPS
    reference.assert_same_weights(run)
    assert owned_by_root(run) == []


def test_a_stopped_rank_in_the_image_is_a_hang_named_with_every_stack(faults, reference):
    """py-spy (the bound Python's) dumps the ranks inside the image from outside it, as the
    user: no ptrace restriction on this machine (no Yama; docs/containers.md says what
    changes with one)."""
    jobs, states, (rank, node) = faults
    run, _ = jobs["srun-loop"]
    [hang] = named(run, "hang")
    assert rank in hang["ranks"].split() and node in hang["nodes"].split(), (hang, rank, node)
    stacks = sorted(Path(hang["stacks"]).iterdir())
    assert [p.name.split("-")[0] for p in stacks] == ["rank0", "rank1"], stacks
    for p in stacks:
        assert "Thread" in p.read_text(), f"{p.name}: {p.read_text()}"
    assert states["srun-loop"] == "COMPLETED", describe(run)
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    reference.assert_same_weights(run)
    assert owned_by_root(run) == []
