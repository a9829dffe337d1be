#!/usr/bin/env python3
"""How long a restart takes to load its state: from node memory (train.memory_steps; the
rank's own copy, or the copy its peer node kept) against the durable checkpoint, the same
state, in the same run.

    python scripts/bench_load.py [--rounds 3] [--json out.json]

Two processes, each a "node" of its own (SLURMD_NODENAME a and b, one rank a node, gloo),
the wide CPU model of scripts/bench_save.py (38.5 M parameters, 442 MiB with AdamW's state)
sharded by FSDP2 over both. After two steps: a durable save (step 100, DCP, to /tmp's disk)
and a copy in node memory (step 101, /dev/shm, and on the peer). Then, alternating, each
round:

* **durable**: ``engine.load`` of step 100, its files first dropped from the page cache
  (``posix_fadvise DONTNEED``), as a restart on another node would find them;
* **memory, own**: ``MemoryTier.restore``, every rank from its own node's copy;
* **memory, peer**: the same with rank 1's own copy hidden (its node was replaced): rank 1's
  state comes from node a over the network (here: loopback).

Each time runs from a barrier to a barrier on both ranks (the slowest rank's), medians.

Then what a copy into node memory costs the training loop, ``COPY_STEPS`` steps measured
with a copy and without, alternating, each round:

* **copy, whole**: the copy and its wait (``keep`` then ``finish``: the write here, the send
  to the peer, the barrier), then the steps: what the loop waited for when the copy was
  synchronous;
* **copy, beside the steps**: ``keep`` (the state copied in host memory), the steps while
  the copy is serialized, written and sent in its thread, then ``finish``: the trainer's way;
* **copy, the call**: ``keep`` alone, what the loop itself waits for.

Each is the time over the same steps without a copy. On a machine with few cores the
copy's thread takes CPU from the steps: that is counted, it is in the time of the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_save import MODELS, build  # noqa: E402  (scripts/ is sys.path[0])
from slurmtrain.train.distributed import close_world, init_world  # noqa: E402

WIDE = "wide (dim 1024, 8 layers)"
COPY_STEPS = 6


def timed(fn) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - start


def uncache(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def rank_main(rank: int, port: str, tmp: str, rounds: int, out: dict) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=port, SLURMD_NODENAME="ab"[rank], SLURMTRAIN_MEMORY_DIR=f"{tmp}/shm")
    torch.set_num_threads(1)
    torch.cuda.is_available = lambda: False
    world = init_world()
    t, params = build(Path(tmp), MODELS[WIDE] + [("train.memory_steps", 1), ("train.async_save", False),
                                                 ("train.global_batch_size", 4)], world)
    ckpt, durable = t.ckpt, Path(tmp) / "run" / "checkpoints" / "step_100"
    ckpt.save(100)
    ckpt.keep_in_memory(101)
    ckpt.memory.finish()
    template = lambda: {"step": 0, "data": t.stream.state_dict()}  # noqa: E731
    own = next(Path(tmp, "shm", "b").glob("step_101-*")) / "rank1.pt"
    got: dict[str, list[float]] = {"durable": [], "memory, own": [], "memory, peer": []}
    for r in range(rounds + 1):  # the first round warms up and is not counted
        uncache(durable)
        times = {"durable": timed(lambda: t.engine.load(durable, template())),
                 "memory, own": timed(lambda: ckpt.memory.restore(template(), 100))}
        if rank == 1:
            own.rename(own.with_suffix(".aside"))
        times["memory, peer"] = timed(lambda: ckpt.memory.restore(template(), 100))
        if rank == 1:
            own.with_suffix(".aside").rename(own)
        for k, v in times.items():
            if r:
                got[k].append(v)
    got.update(copy_costs(t, rounds))
    if rank == 0:
        size = sum(f.stat().st_size for f in durable.rglob("*") if f.is_file())
        out.update(params=params, checkpoint_mb=round(size / 2**20, 1),
                   **{k: round(statistics.median(v), 3) for k, v in got.items()})
    close_world()


def copy_costs(t, rounds: int) -> dict[str, list[float]]:
    """What a copy into node memory adds to COPY_STEPS training steps: waited for whole, and
    written beside the steps (the module's docstring). Steps 200 on: the copies of step 101
    the loads above read are pruned by now (two kept)."""
    ckpt, step = t.ckpt, 200

    def steps() -> None:
        for _ in range(COPY_STEPS):
            t._train_step()

    def whole() -> None:
        ckpt.keep_in_memory(step)
        ckpt.memory.finish()
        steps()

    def beside() -> None:
        ckpt.keep_in_memory(step + 1)
        steps()
        ckpt.memory.finish()

    def call() -> None:
        ckpt.keep_in_memory(step + 2)

    got: dict[str, list[float]] = {"copy, whole": [], "copy, beside the steps": [], "steps alone": [],
                                   "copy, the call": []}
    for r in range(rounds + 1):
        alone, w, b = timed(steps), timed(whole), timed(beside)
        taken = timed(call)  # the state copied, the thread started: no steps to share the CPU with
        ckpt.memory.finish()
        step += 3
        if r:
            got["steps alone"].append(alone)
            got["copy, whole"].append(w - alone)
            got["copy, beside the steps"].append(b - alone)
            got["copy, the call"].append(taken)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_main, args=(port, tmp, a.rounds, out), nprocs=2)
        figures = {"torch": torch.__version__, "load": os.getloadavg()[0], "rounds": a.rounds, **out}
    d = figures["durable"]
    for k in ("memory, own", "memory, peer"):
        print(f"{k}: {figures[k] * 1000:.0f} ms, {figures[k] / d:.2f}x the durable load ({d * 1000:.0f} ms)")
    w, b = figures["copy, whole"], figures["copy, beside the steps"]
    print(f"a copy into node memory adds {w * 1000:.0f} ms to {COPY_STEPS} steps waited for whole, {b * 1000:.0f} ms "
          f"written beside them: {b / w:.2f}x ({COPY_STEPS} steps alone: {figures['steps alone'] * 1000:.0f} ms; "
          f"the call itself, the state copied to host memory: {figures['copy, the call'] * 1000:.0f} ms)")
    print(f"({figures['params']:,} parameters, checkpoint {figures['checkpoint_mb']} MiB, 2 ranks, median of "
          f"{a.rounds}, load average {figures['load']:.1f})")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
