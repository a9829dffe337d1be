"""A user's program that keeps the stop contract with no torch: it counts to STEPS, one
step every SECONDS, saving its count to counter.json in the run directory every SAVE steps
and when asked to stop; a new start resumes from the saved count.

    python3 counter.py STEPS SECONDS SAVE [NAME] [--linger S] [--stall S]

NAME: the state file's name, formatted with the environment (default counter.json): a name
with {SLURM_RESTART_COUNT} in it is a folder per start, as a log folder named by job id is,
where a requeued start finds nothing to resume from. --linger S: after a stop, the process
stays S seconds once it has reported `stopped` (a rank stuck closing its process group).
--stall S: asked to stop, it first sleeps S seconds (a save far slower than the grace time).
"""

import json
import os
import sys
import time
from pathlib import Path

from slurmtrain import stop

args = sys.argv[1:]
linger = float(args.pop(args.index("--linger") + 1)) if "--linger" in args else 0.0
stall = float(args.pop(args.index("--stall") + 1)) if "--stall" in args else 0.0
args = [a for a in args if a not in ("--linger", "--stall")]
steps, seconds, save_every = int(args[0]), float(args[1]), int(args[2])
# Slurm sets SLURM_RESTART_COUNT from the first requeue on: "0" before.
name = args[3].format_map({"SLURM_RESTART_COUNT": "0", **os.environ}) if len(args) > 3 else "counter.json"
state = Path(os.environ.get("SLURMTRAIN_RUN_DIR", ".")) / name


def save(step: int) -> None:
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    tmp.replace(state)
    stop.saved(step, state)


stop.install()
start = json.loads(state.read_text())["step"] if state.exists() else 0
if start:
    stop.resumed(start)
print(f"counting from {start} to {steps}", flush=True)
for step in range(start + 1, steps + 1):
    time.sleep(seconds)
    stop.heartbeat(step)
    if stop.should_stop():
        time.sleep(stall)
        save(step)
        print(f"stopped at {step}", flush=True)
        try:
            stop.stopped(step)
        finally:
            time.sleep(linger)
    if step % save_every == 0:
        save(step)
stop.finished(steps)
print(f"counted to {steps}", flush=True)
