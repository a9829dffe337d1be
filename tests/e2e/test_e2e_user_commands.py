"""Users' own commands end to end on the sandbox: launchers written into the command
(torchrun, `python -m torch.distributed.run` of a virtualenv's interpreter, deepspeed), each
one world of 4 ranks, and a failing program's batch log. (A virtualenv's interpreter under
each of slurmtrain's launchers: tests/e2e/test_e2e_jobs.py.)

One batch of jobs is submitted at once and followed with one status query per poll.
"""

from __future__ import annotations

import re
import time

import pytest

from e2e_util import PROGRAM, cli, make_venv, ranks, submit, wait_final

pytestmark = pytest.mark.slurm

NESTED = {
    "torchrun": ["torchrun", "--nproc_per_node", "2", str(PROGRAM), "x y"],
    "python-m": ["{venv_python}", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                 str(PROGRAM), "x y"],
    "deepspeed": ["deepspeed", "--num_gpus", "2", str(PROGRAM), "x y"],
}


@pytest.fixture(scope="module")
def batch(_sandbox_session, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("usercmd")
    venv = cwd / "venv"
    venv_python = make_venv(venv)
    names = {}
    for port, (form, command) in enumerate(NESTED.items(), start=29740):
        command = [w.format(venv_python=venv_python) for w in command]
        names[f"nested-{form}"] = submit(cwd, "--profile", "local", "--name", f"nested-{form}",
                                         "--set", f"launch.rdzv_port={port}", "--", *command)
    names["fails"] = submit(cwd, "--profile", "local", "--launcher", "srun", "--name", "fails",
                            "--set", "launch.rdzv_port=29749", "--", venv_python, str(PROGRAM), "--exit-code", "3")
    started = time.monotonic()
    final = wait_final(cwd, list(names.values()), timeout=420)
    print(f"user-command batch: {len(names)} jobs final after {time.monotonic() - started:.0f} s")
    return {"cwd": cwd, "venv": str(venv), "names": names, "final": final}


def one_world_of_four(batch, key: str) -> list[dict]:
    name = batch["names"][key]
    st = batch["final"][name]
    assert (st["state"], st["exit_code"]) == ("COMPLETED", 0), cli(batch["cwd"], "logs", name).stdout[-4000:]
    got = ranks(batch["cwd"], name)
    assert sorted(r["rank"] for r in got) == [0, 1, 2, 3], got
    assert {r["world_size"] for r in got} == {4} and {r["sum"] for r in got} == {10.0}
    assert sorted((r["node"], r["local_rank"]) for r in got) == [
        ("stnode1", 0), ("stnode1", 1), ("stnode2", 0), ("stnode2", 1)]
    return got


@pytest.mark.parametrize("form", list(NESTED))
def test_a_launcher_in_the_command_runs_one_world(batch, form):
    got = one_world_of_four(batch, f"nested-{form}")
    assert all(r["args"] == ["x y"] for r in got)
    if form == "python-m":
        assert {r["prefix"] for r in got} == {batch["venv"]}


def test_batch_log_ends_with_the_failure_and_its_node(batch):
    name = batch["names"]["fails"]
    assert batch["final"][name]["state"] == "FAILED"
    (log,) = (batch["cwd"] / "runs" / name / "logs").glob("job-*.out")
    last = log.read_text().strip().splitlines()[-1]
    # The failed task's 3, not srun's 143 when --kill-on-bad-exit ended the other tasks first
    assert re.search(r"failed, exit status 3, first failure on node stnode[12];", last), last
