"""Benchmarks of submit and status on the sandbox (`slurmtrain sandbox up` first).

1. Time from `slurmtrain submit` to the first line of training output, next to the
   same command in a minimal hand-written sbatch script (srun + torchrun), on the same
   sandbox in the same run, alternating. Goal: ratio <= 1.2. Also: how long `submit`
   itself took (the CLI, until sbatch answered), and the peak RSS of the job's supervisor
   (`python -m slurmtrain.job`, VmHWM sampled from /proc while the job runs; goal < 60 MB).
2. Wall time of `slurmtrain status` for 100 runs, and how many Slurm queries it makes
   (the Slurm commands are wrapped to count their calls). Goal: < 1 s, one query.

    eval "$(slurmtrain sandbox env)"
    python scripts/bench_submit.py --runs 3
    python scripts/bench_submit.py --recipe tiny-demo --first-line 'step'
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "tests" / "e2e" / "allreduce.py"

HAND_SCRIPT = """#!/bin/bash
#SBATCH --job-name=hand
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --partition=debug
#SBATCH --output={out}/hand-%j.out
export SLURMTRAIN_RUN_DIR={out} OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT={port}
srun bash -c 'exec python3 -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --node-rank="$SLURM_NODEID" \\
  --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" {command}'
"""


def wait_for_line(files, pattern: re.Pattern, timeout: float) -> float:
    """Poll ``files()`` until a line matches; the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in files():
            try:
                if pattern.search(path.read_text(errors="replace")):
                    return time.monotonic()
            except FileNotFoundError:
                pass
        time.sleep(0.05)
    raise SystemExit(f"bench: no line matching {pattern.pattern!r} within {timeout:.0f} s in {files()}")


def wait_gone(job_id: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        if not out or out in ("COMPLETED", "FAILED", "CANCELLED"):
            return
        time.sleep(0.5)
    raise SystemExit(f"bench: job {job_id} still in the queue after {timeout:.0f} s")


class SupervisorRSS(threading.Thread):
    """The largest VmHWM (peak RSS) of any `python -m slurmtrain.job` process seen while it runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kb, self.done = 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for proc in Path("/proc").iterdir():
                try:
                    if proc.name.isdigit() and b"\0slurmtrain.job\0" in (proc / "cmdline").read_bytes():
                        hwm = re.search(r"^VmHWM:\s+(\d+) kB", (proc / "status").read_text(), re.M)
                        self.peak_kb = max(self.peak_kb, int(hwm[1]) if hwm else 0)
                except OSError:
                    pass
            self.done.wait(0.05)


LAUNCHER: list[str] = []  # --launcher X for slurmtrain's jobs (default: the profile's, torchrun)


def one_slurmtrain(work: Path, command: list[str], pattern: re.Pattern, port: int) -> tuple[float, float, int]:
    """(submit to first line, submit's own time, the supervisor's peak RSS in kB)."""
    rss = SupervisorRSS()
    rss.start()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "slurmtrain", "submit", "--runs-dir", str(work / "runs"),
                           "--profile", "local", "--name", "bench", "--set", f"launch.rdzv_port={port}",
                           *LAUNCHER, *command], capture_output=True, text=True, timeout=120)
    cli = time.monotonic() - t0
    if proc.returncode:
        raise SystemExit(f"bench: submit failed: {proc.stderr}")
    run = Path(re.search(r"^run directory: (.+)$", proc.stdout, re.M)[1])
    job_id = re.search(r"^submitted job (\d+)", proc.stdout, re.M)[1]
    seen = wait_for_line(lambda: sorted((run / "logs").glob(f"{job_id}-*.out")), pattern, 120)
    wait_gone(job_id)
    rss.done.set()
    rss.join()
    return seen - t0, cli, rss.peak_kb


def one_hand(work: Path, command: list[str], pattern: re.Pattern, port: int) -> float:
    out = work / "hand"
    out.mkdir(exist_ok=True)
    script = work / "hand.sbatch"
    program = command[2:] if command[:2] == ["--", "python"] else command
    script.write_text(HAND_SCRIPT.format(out=out, port=port, command=" ".join(map(str, program))))
    t0 = time.monotonic()
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60)
    if proc.returncode:
        raise SystemExit(f"bench: sbatch failed: {proc.stderr}")
    job_id = proc.stdout.strip().split(";")[0]
    seen = wait_for_line(lambda: [out / f"hand-{job_id}.out"], pattern, 120)
    wait_gone(job_id)
    return seen - t0


def bench_submit(args) -> dict:
    command = ["--recipe", args.recipe] if args.recipe else ["--", "python", str(PROGRAM)]
    pattern = re.compile(args.first_line, re.M)
    work = Path(tempfile.mkdtemp(prefix="bench-submit-"))
    ours, hand, cli, rss = [], [], [], []
    try:
        for i in range(args.runs):  # alternate, so drift in machine load hits both alike
            seen, took, peak = one_slurmtrain(work, command, pattern, 29800 + 2 * i)
            ours.append(seen), cli.append(took), rss.append(peak)
            hand.append(one_hand(work, command if not args.recipe else
                                 ["-m", "slurmtrain.train", "--recipe", args.recipe], pattern, 29801 + 2 * i))
            print(f"  run {i + 1}: slurmtrain {ours[-1]:.2f} s (submit itself {took:.2f} s, supervisor peak RSS "
                  f"{peak / 1024:.1f} MB), hand-written sbatch {hand[-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    o, h = statistics.median(ours), statistics.median(hand)
    return {"submit_to_first_line_s": round(o, 2), "hand_sbatch_to_first_line_s": round(h, 2),
            "ratio": round(o / h, 3), "submit_cli_s": round(statistics.median(cli), 2),
            "supervisor_peak_rss_mb": round(max(rss) / 1024, 1), "runs": args.runs}


def bench_status(n: int) -> dict:
    """`slurmtrain status` for ``n`` runs, with the Slurm commands counted by wrappers."""
    known = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=30).stdout
    job_ids = re.findall(r"^JobId=(\d+)", known, re.M) or ["999999"]
    work = Path(tempfile.mkdtemp(prefix="bench-status-"))
    try:
        wrappers = work / "bin"
        wrappers.mkdir()
        calls = work / "calls.log"
        for tool in ("scontrol", "sacct", "squeue"):
            real = shutil.which(tool)
            (wrappers / tool).write_text(f'#!/bin/sh\necho {tool} >> "{calls}"\nexec {real} "$@"\n')
            (wrappers / tool).chmod(0o755)
        runs = work / "runs"
        names = []
        for i in range(n):
            run = runs / f"bench-{i:03d}"
            (run / "logs").mkdir(parents=True)
            job_id = job_ids[i % len(job_ids)]
            (run / "manifest.json").write_text(json.dumps({
                "name": run.name, "job_name": run.name, "state": "submitted", "job_ids": [job_id],
                "nodes": 2, "submitted_at": "2026-01-01T00:00:00"}))
            (run / "events.jsonl").write_text(json.dumps({"time": 1.0, "event": "submitted", "job_id": job_id}) + "\n")
            names.append(run.name)
        env = dict(os.environ, PATH=f"{wrappers}{os.pathsep}{os.environ['PATH']}")
        out = {}
        for label, argv in (("status", ["status", "--runs-dir", str(runs), *names]),
                            ("runs", ["runs", "--runs-dir", str(runs)])):
            times = []
            for _ in range(5):
                calls.write_text("")
                t0 = time.monotonic()
                proc = subprocess.run([sys.executable, "-m", "slurmtrain", *argv], env=env,
                                      capture_output=True, text=True, timeout=120)
                times.append(time.monotonic() - t0)
                if proc.returncode:
                    raise SystemExit(f"bench: slurmtrain {label} failed: {proc.stderr}")
            queries = calls.read_text().split()
            out[label] = {"median_s": round(statistics.median(times), 3), "slurm_calls": queries}
        return {"runs": n, **out}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="submissions of each kind (alternating)")
    ap.add_argument("--recipe", help="time the built-in trainer with this recipe instead of the all-reduce program")
    ap.add_argument("--first-line", default=r"^rank 0/", help="regex of the first line of training output")
    ap.add_argument("--status-runs", type=int, default=100)
    ap.add_argument("--launcher", help="slurmtrain's launcher (default: the local profile's, torchrun, static "
                    "rendezvous; the hand-written script uses torchrun's static rendezvous, as srun-loop does)")
    ap.add_argument("--skip-submit", action="store_true")
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit('bench: set SLURM_CONF first: eval "$(slurmtrain sandbox env)"')
    result = {}
    if args.launcher:
        LAUNCHER[:] = ["--launcher", args.launcher]
    if not args.skip_submit:
        print("submit -> first line of output (median of alternating runs):", flush=True)
        result["submit"] = bench_submit(args)
    result["status"] = bench_status(args.status_runs)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
