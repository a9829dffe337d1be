"""Jobs whose program runs inside a real apptainer image (SIF), submitted by an ordinary
user, with the supervisor outside the image (scripts/container_lane.sh)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from container_util import profile_text
from survival_util import (TRAIN, Reference, describe, named, resumes_where_it_stopped, slurm, submit,
                           wait_job_gone, wait_until)

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
