"""How fast a run stops and comes back: seconds from the stop request to a complete
checkpoint, steps lost, and time until training resumes, on the sandbox, for tiny-demo.

One run on the `low` partition (2 nodes, 1 process each) is stopped ``--rounds`` times
by each of two causes:

* preemption: a job on `high` that needs every CPU. Slurm sends SIGTERM to the tasks;
  the request time is Slurm's PreemptTime (1 s resolution) or, when later, the moment
  the preempting job was submitted.
* warning signal: ``scancel --batch --signal=USR2``, which is what Slurm does
  ``signal_seconds`` before the time limit (``#SBATCH --signal=B:USR2@N``); the request
  time is the script's ``signal`` event.

Slurm holds a requeued job for about two minutes before it may start again; this
script releases it after 5 s (``scontrol update StartTime=now``) and reports the time to
resume without that hold.

    eval "$(slurmtrain sandbox env)"   # or: slurmtrain sandbox up
    python scripts/bench_preempt.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sh(*argv: str, check: bool = True) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def field(job: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=(\S*)", sh("scontrol", "-o", "show", "job", job, check=False))
    return m[1] if m else None


def events(run: Path) -> list[dict]:
    path = run / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def wait(what: str, pred, job: str, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        # Not at once: a start within seconds of the requeue is refused ("Job credential
        # revoked") and the job ends FAILED. SubmitTime is the time of the requeue.
        if field(job, "JobState") == "PENDING" and field(job, "Reason") == "BeginTime" \
                and time.time() - slurm_time(field(job, "SubmitTime")) >= 5:
            sh("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
        time.sleep(0.5)
    return value


def slurm_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="stops of each kind")
    p.add_argument("--steps", type=int, default=100000, help="train.steps (the run is cancelled at the end)")
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print one JSON object per stop too")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-preempt-"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "slurmtrain", "demo-corpus", "--max-mb", "0.5"], cwd=work,
                   check=True, env=env, capture_output=True)
    out = subprocess.run([sys.executable, "-m", "slurmtrain", "submit", "--runs-dir", "runs", "--partition", "low",
                          "--set", "launch.procs_per_node=1", "--name", "bench-preempt", "--",
                          "python3", "-m", "slurmtrain.train", "--recipe", "tiny-demo", "--train-steps",
                          str(args.steps), "--save-steps", str(args.save_steps), "--eval-steps", "0"],
                         cwd=work, check=True, env=env, capture_output=True, text=True).stdout
    job = re.search(r"submitted job (\d+)", out)[1]
    run = Path(re.search(r"run directory: (\S+)", out)[1])
    rows = []
    try:
        for n, cause in enumerate(["preemption"] * args.rounds + ["warning signal"] * args.rounds, start=1):
            # Stop it while it trains: after this start's first checkpoint past the resume.
            wait(f"progress before stop {n}", lambda: len([e for e in events(run) if e["event"] == "started"]) == n
                 and events(run)[-1]["event"] == "checkpoint_saved", job)
            asked = time.time()
            if cause == "preemption":
                sh("sbatch", "--parsable", "-p", "high", "-N", "2", "--ntasks-per-node=4", "-o", "/dev/null",
                   "--wrap", "sleep 2")
            else:
                sh("scancel", "--batch", "--signal=USR2", job)
            wait(f"requeue {n}", lambda: sum(e["event"] == "requeue" for e in events(run)) >= n, job)
            if cause == "preemption":
                preempt = field(job, "PreemptTime")
                asked = max(asked, slurm_time(preempt)) if preempt and preempt[0].isdigit() else asked
            else:
                asked = [e for e in events(run) if e["event"] == "signal"][-1]["time"]
            evs = events(run)
            stopped = [e for e in evs if e["event"] == "stopped"][-1]
            requeued = [e for e in evs if e["event"] == "requeue"][-1]
            wait(f"resume {n}", lambda: sum(e["event"] == "resumed" for e in events(run)) >= n, job)
            evs = events(run)
            restarted = [e for e in evs if e["event"] == "started"][-1]
            resumed = [e for e in evs if e["event"] == "resumed"][-1]
            rows.append({"cause": cause, "to_checkpoint_s": round(stopped["time"] - asked, 2),
                         "to_requeue_s": round(requeued["time"] - asked, 2),
                         "restart_to_resumed_s": round(resumed["time"] - restarted["time"], 2),
                         "stopped_step": stopped["step"], "resumed_step": resumed["step"],
                         "steps_lost": stopped["step"] - resumed["step"]})
            print(json.dumps(rows[-1]) if args.json else f"stop {n} ({cause}): {rows[-1]}", flush=True)
    finally:
        sh("scontrol", "update", f"JobId={job}", "Requeue=0", check=False)
        sh("scancel", job, check=False)

    print("\n| cause | stops | request to complete checkpoint (s) | to requeue (s) | restart to resumed (s) | steps lost |")
    print("|---|---|---|---|---|---|")
    for cause in ("preemption", "warning signal"):
        mine = [r for r in rows if r["cause"] == cause]
        med = {k: statistics.median(r[k] for r in mine) for k in ("to_checkpoint_s", "to_requeue_s",
                                                                  "restart_to_resumed_s")}
        span = {k: f"{med[k]:.1f} ({min(r[k] for r in mine):.1f}-{max(r[k] for r in mine):.1f})" for k in med}
        lost = max(r["steps_lost"] for r in mine)
        print(f"| {cause} | {len(mine)} | {span['to_checkpoint_s']} | {span['to_requeue_s']} | "
              f"{span['restart_to_resumed_s']} | {lost} (max) |")
    print(f"\nrun directory: {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
