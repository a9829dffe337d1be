"""The node-memory tier (train.memory_steps, slurmtrain/train/memtier.py) end to end on CPU:
two "nodes" of one rank each (FSDP2 over both), each node a torchrun of its own with its node
name (so each has its own folder of node memory), as the torchrun launcher starts them on a
cluster."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spawn_ranks import free_port  # a port below the ephemeral ones
from trainer_util import env, setup_run

pytestmark = [pytest.mark.torch, pytest.mark.slow]

STEPS = 16


def two_nodes(cwd: Path, args: list[str], nodes: tuple[str, str], memory: Path) -> list[subprocess.CompletedProcess]:
    """The trainer on 2 nodes x 1 rank: one torchrun per node, the static rendezvous."""
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={i}",
                               "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}",
                               "-m", "slurmtrain.train", *args], cwd=cwd,
                              env=env(SLURMD_NODENAME=node, SLURMTRAIN_MEMORY_DIR=str(memory)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, node in enumerate(nodes)]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=600), p.communicate()[0], "") for p in procs]


def weights(run: Path) -> dict[str, torch.Tensor]:
    from slurmtrain.train.engines import load_consolidated
    return load_consolidated(run)[1]


def test_a_crash_then_a_lost_node_resume_from_node_memory_and_end_bitwise(tmp_path):
    recipe = setup_run(tmp_path, steps=STEPS)
    memory = tmp_path / "shm"
    common = ["--recipe", str(recipe), "--set", "train.memory_steps=4", "--set", "train.save_steps=0"]
    reference = two_nodes(tmp_path, common + ["--run-dir", "reference"], ("r1", "r2"), tmp_path / "shm-ref")
    assert all(p.returncode == 0 for p in reference), reference[0].stdout[-3000:]

    crashed = two_nodes(tmp_path, common + ["--run-dir", "run", "--set", "debug.fail_at_step=11"], ("a", "b"), memory)
    assert any(p.returncode != 0 for p in crashed)
    # Each node holds its own rank's copy and its peer's: step 8 (and 4) in node memory.
    held = {node: sorted(p.name for p in (memory / node).glob("step_8-*/rank*.pt")) for node in ("a", "b")}
    assert held == {"a": ["rank0.pt", "rank1.pt"], "b": ["rank0.pt", "rank1.pt"]}, held
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing durable: only memory can resume it

    # Node b is lost (its memory with it); a spare, c, takes its place: rank 1 gets its
    # state from the copy node a kept for it.
    shutil.rmtree(memory / "b")
    resumed = two_nodes(tmp_path, common + ["--run-dir", "run"], ("a", "c"), memory)
    assert all(p.returncode == 0 for p in resumed), resumed[0].stdout[-3000:] + resumed[1].stdout[-3000:]
    [resume] = [e for e in map(json.loads, (tmp_path / "run" / "events.jsonl").read_text().splitlines())
                if e["event"] == "resumed"]
    assert (resume["step"], resume["tier"], resume["from_peer"]) == (8, "memory", [1]), resume
    got, want = weights(tmp_path / "run"), weights(tmp_path / "reference")
    assert got.keys() == want.keys() and all(got[k].equal(want[k]) for k in want)
    assert not memory.exists() or not any(memory.iterdir()), list(memory.rglob("*"))  # gone with the run


@pytest.fixture
def small_shm(tmp_path):
    """A node's memory folder on a tmpfs of 64 KiB, a small /dev/shm (a container's is 64 MB)."""
    folder = tmp_path / "shm" / "b"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs here (mount: {mounted.stderr.strip()}): needs root")
    try:
        yield tmp_path / "shm"
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_node_memory_too_small_for_a_copy_turns_the_tier_off_and_training_goes_on(tmp_path, small_shm):
    recipe = setup_run(tmp_path, steps=STEPS)
    args = ["--recipe", str(recipe), "--run-dir", "run", "--set", "train.memory_steps=2", "--set", "train.save_steps=8"]
    ran = two_nodes(tmp_path, args, ("a", "b"), small_shm)
    out = ran[0].stdout + ran[1].stdout
    assert all(p.returncode == 0 for p in ran), out[-4000:]
    evs = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    [off] = [e for e in evs if e["event"] == "memory_off"]
    assert off["step"] == 2 and "No space left on device" in off["error"] and str(small_shm / "b") in off["error"], off
    assert "no more copies in node memory this launch: the copy of step 2 could not be written" in out, out[-4000:]
    assert [e["step"] for e in evs if e["event"] == "checkpoint_saved"] == [8, 16]  # the durable tier went on
    assert [e.get("step") for e in evs if e["event"] == "finished"] == [STEPS]
    assert not list(small_shm.rglob("rank*.pt")), list(small_shm.rglob("*"))  # nothing half-written left
