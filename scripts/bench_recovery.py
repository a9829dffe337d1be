"""How fast a run is training again after a fault, on the sandbox, for tiny-demo: the
in-job restart against a cold start and against the requeue path, in one run.

One run (2 nodes, 1 process each, a checkpoint every 10 steps) meets, ``--rounds`` times:

* a crash: one trainer rank SIGKILLed after a checkpoint. The supervisor launches again
  in the allocation; **in-job recovery** is the kill to the relaunched launch's first
  step (its ``first_step`` event's own time);
* a requeue: ``scontrol requeue`` after a checkpoint (what Slurm does after a node
  failure). **Requeue recovery** is the requeue to the next start's first step: the end of
  the job, Slurm's hold of a requeued job (``BeginTime``, about two minutes; with
  ``--release-after S`` the script lifts it S seconds after the requeue, as the tests
  do), the start and the checkpoint load. That start's own ``started`` to first step is
  the **cold start-up plus checkpoint load**, the yardstick.

The first start's ``started`` to first step is the cold start-up without a checkpoint.
Goals (the issue): in-job recovery within 1.5x the cold start-up plus checkpoint load,
and several times faster than the requeue.

    eval "$(slurmtrain sandbox env)"   # or: slurmtrain sandbox up
    python scripts/bench_recovery.py --rounds 2 [--release-after 5] [--json]

``--memory-tier``: in-job recovery with the node-memory tier (``train.memory_steps``)
against today's path (the durable checkpoint), on a wider model than tiny-demo (``--dim``,
``--layers``, ``--seq-len``, ``--micro-batch``; a durable save every 5 steps), in one run of the script: jobs of each kind in
turn, each crashed at most twice (once on each node: a node whose ranks fail first in two
launches of a start is left out as a bad one), ``--rounds`` crashes of each kind in all. The tier's job is crashed once a copy in memory is newer than the
durable checkpoint (its restart loads that copy: the ``resumed`` event says so); the other
right after a durable save. Before each kill the durable checkpoint's files are dropped from
the page cache, as a restart on another node of a cluster would find them. Goal (issue 35):
the tier's recovery at most 0.7x today's.

    python scripts/bench_recovery.py --memory-tier --rounds 3 [--dim 2048 --layers 8 --seq-len 64 --micro-batch 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = 100_000  # the run is cancelled at the end


def sh(*argv: str, check: bool = True) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        sys.exit(f"bench_recovery: {' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def events(run: Path) -> list[dict]:
    path = run / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def named(run: Path, name: str) -> list[dict]:
    return [e for e in events(run) if e["event"] == name]


def wait(what: str, pred, timeout: float = 600, tick=None):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            sys.exit(f"bench_recovery: timed out after {timeout:.0f} s waiting for {what}")
        if tick is not None:
            tick()
        time.sleep(0.2)
    return value


def trainer_ranks(run: Path) -> list[int]:
    """The run's trainer processes (not torchrun's agents), on every node of the sandbox."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if b"slurmtrain.train" in argv and b"torch.distributed.run" not in argv and \
                    f"SLURMTRAIN_RUN_DIR={run}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return sorted(found)


def first_step_after(run: Path, t: float) -> dict | None:
    return next((e for e in named(run, "first_step") if e["time"] > t), None)


def saved_after(run: Path, t: float) -> bool:
    return any(e["time"] > t for e in named(run, "checkpoint_saved"))


class Releaser:
    """Lifts Slurm's hold of the requeued job ``after`` seconds after the requeue (None: never)."""

    def __init__(self, job: str, after: float | None):
        self.job, self.after, self.since = job, after, None

    def __call__(self) -> None:
        if self.after is None:
            return
        state = sh("squeue", "-h", "-j", self.job, "-o", "%T %r", check=False).split()
        if state[:2] == ["PENDING", "BeginTime"]:
            self.since = self.since or time.monotonic()
            if time.monotonic() - self.since >= self.after:
                sh("scontrol", "update", f"JobId={self.job}", "StartTime=now", check=False)


def node_of(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"SLURMD_NODENAME=")), "")


def crash(run: Path, before_kill=None, turn: int = 1) -> dict:
    """A trainer rank SIGKILLed after a checkpoint: the rank on the node ``turn`` picks (sorted
    by node), so that crashes in turn fall on both nodes (a node whose rank fails first in
    two launches is left out, as a bad node)."""
    t0 = time.time()
    wait("a checkpoint and two ranks", lambda: saved_after(run, t0 - 1) and len(trainer_ranks(run)) == 2)
    if before_kill is not None:
        before_kill(t0)
    killed = time.time()
    os.kill(sorted(trainer_ranks(run), key=node_of)[turn % 2], signal.SIGKILL)
    first = wait("the relaunched launch's first step", lambda: first_step_after(run, killed))
    relaunched = [e for e in named(run, "relaunched") if e["time"] > killed][0]
    resumed = [e for e in named(run, "resumed") if e["time"] > killed]
    return {"in_job_s": first["at"] - killed, "detected_s": relaunched["time"] - killed,
            "relaunch_to_step_s": first["at"] - relaunched["time"],
            "first_step_s": first["at"] - resumed[-1]["time"] if resumed else float("nan")}


def requeue(run: Path, job: str, release_after: float | None) -> dict:
    t0 = time.time()
    wait("a checkpoint and two ranks", lambda: saved_after(run, t0 - 1) and len(trainer_ranks(run)) == 2)
    asked = time.time()
    sh("scontrol", "requeue", job)
    rel = Releaser(job, release_after)
    started = wait("the next start", lambda: next((e for e in named(run, "started") if e["time"] > asked), None),
                   tick=rel)
    first = wait("its first step", lambda: first_step_after(run, started["time"]))
    return {"requeue_s": first["at"] - asked, "cold_plus_load_s": first["at"] - started["time"],
            "queue_s": started["time"] - asked}


def summary(rows: list[dict], cold: float, release_after: float | None) -> str:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    span = {k: f"{med[k]:.1f} ({min(r[k] for r in rows):.1f}-{max(r[k] for r in rows):.1f})" for k in med}
    base = med["cold_plus_load_s"]
    hold = "Slurm's own hold" if release_after is None else f"hold lifted after {release_after:g} s"
    lines = [f"| path | seconds, median (min-max) over {len(rows)} | against cold start-up + load |", "|---|---|---|",
             f"| cold start-up, no checkpoint (first start) | {cold:.1f} | {cold / base:.2f}x |",
             f"| cold start-up + checkpoint load (requeued start) | {span['cold_plus_load_s']} | 1.00x |",
             f"| in-job recovery: kill to first step | {span['in_job_s']} | {med['in_job_s'] / base:.2f}x |",
             f"| ... of which kill to relaunch | {span['detected_s']} | |",
             f"| ... of which relaunch to first step | {span['relaunch_to_step_s']} | |",
             f"| requeue: requeue to first step ({hold}) | {span['requeue_s']} | {med['requeue_s'] / base:.2f}x |",
             f"| ... of which in the queue | {span['queue_s']} | |",
             "",
             f"in-job recovery / (cold start-up + load) = {med['in_job_s'] / base:.2f} (goal: at most 1.5); "
             f"requeue / in-job = {med['requeue_s'] / med['in_job_s']:.1f}x (goal: several times)"]
    return "\n".join(lines)


def uncache(folder: Path) -> None:
    """Drop ``folder``'s files from the page cache: a restart reads them from the disk."""
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def copy_in_memory_after(job: str, step: int) -> bool:
    """A step after ``step`` whose copies (every rank's, on each of the two nodes) are whole."""
    steps: dict[int, set[tuple[str, str]]] = {}
    for f in Path("/dev/shm/slurmtrain").glob(f"{job}-*/*/step_*/rank*.pt"):
        n = int(f.parent.name[len("step_"):].split("-")[0])
        steps.setdefault(n, set()).add((f.parent.parent.name, f.name))
    return any(n > step and len(held) == 4 for n, held in steps.items())


def tier_crash(run: Path, job: str, tier: bool, turn: int) -> dict:
    """One crash of the tier's job (``tier``) or today's; (kill to first step, what it loaded)."""
    def before_kill(t0: float) -> None:
        if tier:
            step = [e for e in named(run, "checkpoint_saved") if e["time"] > t0 - 1][-1]["step"]
            wait("a copy in node memory newer than the checkpoint", lambda: copy_in_memory_after(job, step))
        uncache(run / "checkpoints")

    killed_at = time.time()
    row = crash(run, before_kill, turn)
    resumed = [e for e in named(run, "resumed") if e["time"] > killed_at]
    loaded = resumed[-1].get("tier", "durable") if resumed else "nothing"
    if loaded != ("memory" if tier else "durable"):
        sys.exit(f"bench_recovery: the {'tier' if tier else 'durable'} job's restart loaded {loaded}")
    # Where the time went: the kill seen and the launch ended; the new processes' start-up
    # and model build (to the load's start); the load; the first step (and its heartbeat).
    load_end = resumed[-1]["time"]
    return {"in_job_s": row["in_job_s"], "detected_s": row["detected_s"],
            "startup_s": row["in_job_s"] - row["detected_s"] - row["first_step_s"] - resumed[-1]["seconds"],
            "load_s": resumed[-1]["seconds"], "first_step_s": row["first_step_s"]}


def tier_main(args, work: Path, env: dict) -> int:
    batch = 2 * args.micro_batch
    model = [f"model.dim={args.dim}", f"model.n_layers={args.layers}", "model.n_heads=16", "model.n_kv_heads=16",
             f"data.max_seq_len={args.seq_len}", f"train.global_batch_size={batch}",
             f"train.micro_batch_size={args.micro_batch}"]
    rows: dict[bool, list[dict]] = {True: [], False: []}
    # At most a crash on each node per job: a node whose ranks fail first in two launches of
    # a start is left out as a bad one. The two kinds of job alternate.
    while len(rows[False]) < args.rounds:
        for tier in (True, False):
            crashes = min(2, args.rounds - len(rows[tier]))
            sets = model + [f"train.memory_steps={1 if tier else 0}"]
            job, run = submit(work, env, crashes, f"bench-recovery-{'tier' if tier else 'durable'}", sets, save_steps=5)
            try:
                for turn in range(crashes):
                    row = tier_crash(run, job, tier, turn)
                    rows[tier].append(row)
                    print(f"{'tier' if tier else 'durable'} round {len(rows[tier])}: "
                          + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), file=sys.stderr, flush=True)
            finally:
                sh("scancel", job, check=False)
            wait(f"job {job} to end", lambda: not sh("squeue", "-h", "-j", job, check=False).strip(), timeout=120)
    newest = max((run / "checkpoints").glob("step_*"), key=lambda d: int(d.name[len("step_"):]))
    size = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file()) / 2**20
    print(tier_table(rows, f"dim {args.dim}, {args.layers} layers, {args.micro_batch} x {args.seq_len} tokens "
                           f"a rank a step; a durable save {size:.0f} MiB"))
    return 0


def tier_table(rows: dict[bool, list[dict]], what: str) -> str:
    """The two kinds of recovery side by side, each part's median, the whole's spread."""
    med = {t: {k: statistics.median(r[k] for r in rows[t]) for k in rows[t][0]} for t in rows}
    parts = [("kill seen, launch ended", "detected_s"), ("new processes' start-up and model build", "startup_s"),
             ("checkpoint load", "load_s"), ("first step", "first_step_s")]
    whole = {t: f"**{med[t]['in_job_s']:.1f}** ({min(r['in_job_s'] for r in rows[t]):.1f}-"
                f"{max(r['in_job_s'] for r in rows[t]):.1f})" for t in rows}
    lines = [f"in-job recovery, kill to first step ({what}); seconds, medians over {len(rows[False])}", "",
             "| | today's: the durable checkpoint, read from disk | node-memory tier: each rank its node's copy |",
             "|---|---|---|", f"| kill to first step (min-max) | {whole[False]} | {whole[True]} |"]
    lines += [f"| ... {label} | {med[False][k]:.2f} | {med[True][k]:.2f} |" for label, k in parts]
    ratio = med[True]["in_job_s"] / med[False]["in_job_s"]
    lines += ["", f"tier / durable = {ratio:.2f} (goal: at most 0.7); "
                  f"the load alone: {med[True]['load_s'] / med[False]['load_s']:.2f}"]
    return "\n".join(lines)


def submit(work: Path, env: dict, restarts: int, name: str, sets: list[str], save_steps: int = 10) -> tuple[str, Path]:
    """Submit tiny-demo (with ``sets``) on 2 nodes, 1 process each; (job id, run directory)."""
    out = subprocess.run([sys.executable, "-m", "slurmtrain", "submit", "--runs-dir", "runs", "--nodes", "2",
                          "--set", "launch.procs_per_node=1", "--set", f"resilience.restarts_in_job={restarts}",
                          "--name", name, "--", "python3", "-m", "slurmtrain.train", "--recipe",
                          "tiny-demo", "--train-steps", str(STEPS), "--save-steps", str(save_steps), "--eval-steps", "0",
                          *[a for kv in sets for a in ("--set", kv)]],
                         cwd=work, check=True, env=env, capture_output=True, text=True).stdout
    return re.search(r"submitted job (\d+)", out)[1], Path(re.search(r"run directory: (\S+)", out)[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="crashes and requeues each (default 2)")
    p.add_argument("--memory-tier", action="store_true",
                   help="in-job recovery with the node-memory tier against the durable checkpoint")
    p.add_argument("--dim", type=int, default=2048, help="--memory-tier: the model's width (default 2048)")
    p.add_argument("--layers", type=int, default=8, help="--memory-tier: the model's depth (default 8)")
    p.add_argument("--seq-len", type=int, default=64, help="--memory-tier: tokens a sequence (default 64)")
    p.add_argument("--micro-batch", type=int, default=2, help="--memory-tier: sequences a rank a step (default 2)")
    p.add_argument("--release-after", type=float, default=None,
                   help="lift Slurm's hold of the requeued job after this many seconds (default: keep it)")
    p.add_argument("--json", action="store_true", help="print each round as JSON too")
    args = p.parse_args()
    if args.rounds < 1:
        print("bench_recovery: --rounds must be at least 1", file=sys.stderr)
        return 2
    if not os.environ.get("SLURM_CONF") and subprocess.run(["sinfo", "-h"], capture_output=True).returncode:
        print('bench_recovery: no Slurm to talk to: run `slurmtrain sandbox up` and `eval "$(slurmtrain sandbox env)"`',
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "slurmtrain", "demo-corpus", "--max-mb", "0.5"], cwd=work, check=True,
                   env=env, capture_output=True)
    if args.memory_tier:
        return tier_main(args, work, env)
    job, run = submit(work, env, args.rounds, "bench-recovery", [])
    rows = []
    try:
        started = wait("the first start", lambda: named(run, "started"))[0]
        cold = wait("the first step", lambda: named(run, "first_step"))[0]["at"] - started["time"]
        for n in range(1, args.rounds + 1):
            row = {**crash(run), **requeue(run, job, args.release_after)}
            rows.append(row)
            print(json.dumps(row) if args.json else f"round {n}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()),
                  file=sys.stderr, flush=True)
    finally:
        sh("scontrol", "update", f"JobId={job}", "Requeue=0", check=False)
        sh("scancel", job, check=False)
    print(summary(rows, cold, args.release_after))
    print(f"\nrun directory: {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
