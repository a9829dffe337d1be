#!/usr/bin/env python3
"""An in-job restart on one machine without Slurm: the trainer's process SIGKILLed and a new
one started at once in its place (what the supervisor does in the allocation), loading the
node-memory tier's copy (``train.memory_steps=1``) against the durable checkpoint, in one run.

    python scripts/bench_restart.py [--rounds 3] [--dim 2048 --layers 8 --seq-len 16 --micro-batch 1] [--json out.json]

For a machine with no Slurm (the lent GPU machine): ``scripts/bench_recovery.py
--memory-tier`` measures the same on the sandbox with the supervisor, two nodes and the
peer's copy. Here one process (one GPU, or the CPU), so each restart loads its own copy; the
detection of the death and the launcher are left out (they are the same for both paths).
Each round, the two kinds alternate, each a run of its own: the trainer runs until a durable
save (every 5 steps) and, for the tier, a copy in node memory newer than it; the durable
files are dropped from the page cache (as a restart on another node would find them); then
the kill, and at once the new process. **Kill to first step**: the kill to the new process's
first heartbeat with a step; split into the start-up (to the load), the load (the ``resumed``
event's own time) and the first step. Goal (issue 35): the tier at most 0.7x the durable path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmtrain import heartbeat  # noqa: E402  (torch-free)

sys.path.insert(0, str(REPO / "scripts"))
from bench_recovery import events, tier_table, uncache, wait  # noqa: E402


def trainer(work: Path, job: str, tier: bool, a) -> subprocess.Popen:
    """The trainer of ``job``'s run (a new process: a start, or the restart after a kill)."""
    run = work / job
    (work / f"beat-{job}").mkdir(exist_ok=True)  # the supervisor's part: the heartbeats' folder
    env = {**os.environ, "SLURM_JOB_ID": job, "SLURM_RESTART_COUNT": "0", "SLURMD_NODENAME": "node0",
           heartbeat.ENV: str(work / f"beat-{job}"), "PYTHONPATH": str(REPO),
           "SLURMTRAIN_RUN_DIR": str(run)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURMTRAIN_MEMORY_DIR"):
        env.pop(k, None)
    sets = [f"model.dim={a.dim}", f"model.n_layers={a.layers}", "model.n_heads=16", "model.n_kv_heads=16",
            f"data.max_seq_len={a.seq_len}", f"train.global_batch_size={a.micro_batch}",
            f"train.micro_batch_size={a.micro_batch}", f"train.memory_steps={1 if tier else 0}",
            f"data.path={work / 'demo' / 'corpus.jsonl'}", "train.log_steps=1000"]
    argv = [sys.executable, "-m", "slurmtrain.train", "--recipe", "tiny-demo", "--run-dir", str(run),
            "--train-steps", "100000", "--save-steps", "5", "--eval-steps", "0",
            *[x for kv in sets for x in ("--set", kv)]]
    log = open(work / f"{job}.log", "a")
    return subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)


def beat_after(work: Path, job: str, t: float):
    beats = [b for b in heartbeat.read(work / f"beat-{job}") if b.step is not None and b.time > t]
    return beats[0] if beats else None


def newest(run: Path, name: str, after: float) -> dict | None:
    found = [e for e in events(run) if e["event"] == name and e["time"] > after]
    return found[-1] if found else None


def copy_newer_than(job: str, step: int) -> bool:
    steps = [int(d.name[len("step_"):].split("-")[0]) for d in Path("/dev/shm/slurmtrain").glob(f"{job}-0/*/step_*")
             if any(d.glob("rank*.pt"))]
    return any(n > step for n in steps)


def one_round(work: Path, job: str, tier: bool, a) -> dict:
    run, began = work / job, time.time()
    proc = trainer(work, job, tier, a)
    try:
        saved = wait("a durable save", lambda: newest(run, "checkpoint_saved", began), timeout=600,
                     tick=lambda: proc.poll() is None or sys.exit(f"bench_restart: the trainer ended: {work}/{job}.log"))
        if tier:
            wait("a copy in node memory newer than it", lambda: copy_newer_than(job, saved["step"]), timeout=300)
        uncache(run / "checkpoints")
        killed = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = trainer(work, job, tier, a)
        first = wait("the new process's first step", lambda: beat_after(work, job, killed), timeout=600)
        resumed = newest(run, "resumed", killed)
    finally:
        proc.kill()
        proc.wait()
    loaded = resumed.get("tier", "durable") if resumed else "nothing"
    if loaded != ("memory" if tier else "durable"):
        sys.exit(f"bench_restart: the {'tier' if tier else 'durable'} run's restart loaded {loaded}")
    whole = first.time - killed
    return {"in_job_s": whole, "detected_s": 0.0, "startup_s": resumed["time"] - resumed["seconds"] - killed,
            "load_s": resumed["seconds"], "first_step_s": first.time - resumed["time"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--dir", help="where the runs go (default: a temporary directory under /tmp)")
    p.add_argument("--json", help="also write every round here")
    a = p.parse_args()
    rows: dict[bool, list[dict]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "slurmtrain", "demo-corpus"], cwd=work, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
        for r in range(a.rounds):
            for tier in (True, False):
                job = f"bench-restart-{'tier' if tier else 'durable'}-{r}-{os.getpid()}"
                row = one_round(work, job, tier, a)
                rows[tier].append(row)
                print(f"{'tier' if tier else 'durable'} round {r + 1}: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), file=sys.stderr, flush=True)
                for d in Path("/dev/shm/slurmtrain").glob(f"{job}-*"):
                    subprocess.run(["rm", "-rf", str(d)], check=False)
        import torch
        from slurmtrain.train.checkpoint import newest_complete
        ckpt = newest_complete(work / job)[1]
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file()) / 2**20
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(tier_table(rows, f"{device}, one process, no Slurm; dim {a.dim}, {a.layers} layers, {a.micro_batch} x "
                           f"{a.seq_len} tokens a step; a durable save {size:.0f} MiB").replace(
        "kill seen, launch ended", "kill seen, launch ended (left out here)"))
    if a.json:
        Path(a.json).write_text(json.dumps({"device": device, "torch": torch.__version__, "rounds": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
