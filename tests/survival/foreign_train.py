"""A program of a user's own that honours slurmtrain's stop contract (docs/survival.md).

Started by torchrun on every node (``slurmtrain submit -- python3 foreign_train.py``).
Each step adds the step number to a running sum (all ranks agree on it through an
all-reduce); a stop request -- the signal named in $SLURMTRAIN_STOP_SIGNAL, SIGTERM, or
the file $SLURMTRAIN_STOP_FILE -- is agreed on at the next step boundary, rank 0 saves
the state and every rank exits 75. Started again, it continues from the saved state.
It writes its own lines into events.jsonl so the tests can read what happened.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

STOPPED = 75
requested = False


def on_signal(signum, _frame):
    global requested
    requested = True  # only a flag: the state is saved between steps, never in the handler


def event(run_dir: Path, name: str, **fields) -> None:
    with open(run_dir / "events.jsonl", "a") as f:
        f.write(json.dumps({"time": time.time(), "event": name, **fields}) + "\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-seconds", type=float, default=0.3)
    p.add_argument("--save-seconds", type=float, default=0.0, help="how long saving at a stop takes")
    args = p.parse_args()

    for name in {os.environ.get("SLURMTRAIN_STOP_SIGNAL", "USR2"), "TERM"}:
        signal.signal(getattr(signal, "SIG" + name.removeprefix("SIG")), on_signal)
    run_dir = Path(os.environ["SLURMTRAIN_RUN_DIR"])
    stop_file = Path(os.environ["SLURMTRAIN_STOP_FILE"])
    state_path = run_dir / "foreign_state.json"

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    state = json.loads(state_path.read_text()) if state_path.exists() else {"step": 0, "sum": 0}
    if state["step"] and rank == 0:
        event(run_dir, "resumed", step=state["step"])
    try:
        while state["step"] < args.steps:
            step = state["step"] + 1
            time.sleep(args.step_seconds)  # the "work" of one step
            value = torch.tensor([step], dtype=torch.int64)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)  # every rank is at the same step
            state = {"step": step, "sum": state["sum"] + int(value.item())}
            if rank == 0:
                (run_dir / "foreign_steps").write_text(str(step))
            flag = torch.tensor([int(requested or stop_file.exists())])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                if rank == 0:
                    began = time.monotonic()
                    time.sleep(args.save_seconds)  # a big model's checkpoint
                    tmp = state_path.with_suffix(".tmp")
                    tmp.write_text(json.dumps(state))
                    tmp.replace(state_path)  # atomic: a half-written state is never read
                    event(run_dir, "stopped", step=step, save_seconds=round(time.monotonic() - began, 1))
                dist.barrier()  # nobody exits before the state is on disk
                return STOPPED
        if rank == 0:
            state_path.write_text(json.dumps(state))
            event(run_dir, "finished", step=state["step"], sum=state["sum"])
        dist.barrier()
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
