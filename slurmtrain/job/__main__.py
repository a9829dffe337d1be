"""``python -m slurmtrain.job [knobs] [-- SRUN_OPTION ...]``: the job script's last line.

The knobs are the profile's (the script shows them, and a person may edit them there);
who the job is comes from Slurm's environment, the task's text from ``SLURMTRAIN_TASK``
(and ``SLURMTRAIN_GATE``), both the script's own functions. Anything after ``--`` is
passed to every ``srun`` (a container's options).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .. import heartbeat, launchers
from .signals import Signals
from .slurm import Slurm
from .step import Launch
from .adopt import adopt
from .config import Config, Job
from .supervisor import Supervisor

def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m slurmtrain.job",
                                 description="Supervise a slurmtrain job from its batch step (docs/survival.md).")
    ap.add_argument("--launcher", choices=launchers.names(), required=True)
    ap.add_argument("--procs-per-node", type=int, default=1)
    ap.add_argument("--stop-timeout", type=int, default=90, help="seconds for the checkpoint after a stop")
    ap.add_argument("--max-requeues", type=int, default=10)
    ap.add_argument("--restarts-in-job", type=int, default=3,
                    help="launches again in the allocation after a failure that followed a new checkpoint")
    ap.add_argument("--rendezvous-timeout", type=int, default=600, help="seconds for every node to start")
    ap.add_argument("--hang-timeout", type=int, default=0,
                    help="seconds without a heartbeat before a launch counts as hung (0: derived from the run)")
    ap.add_argument("--requeue-when", choices=("saved", "always"), default="saved")
    ap.add_argument("--bad-node-hours", type=float, default=24.0)
    ap.add_argument("--spare-nodes", type=int, default=0,
                    help="nodes of the allocation kept idle, to take the place of nodes lost in the job")
    ap.add_argument("--straggler-pct", type=float, default=0,
                    help="name a node computing this many percent slower than the others (0: off)")
    ap.add_argument("--warning-seconds", type=int, default=0,
                    help="the time-limit warning's lead (#SBATCH --signal ...@N): stop then if Slurm sent none (0: off)")
    ap.add_argument("--preflight", action="store_true", help="run the preflight gate (slurmtrain_gate) first")
    ap.add_argument("srun_options", nargs="*", help="after --: options for every srun")
    return ap.parse_args(argv)


def _batch_log() -> Path | None:
    """The batch log, when this process's stderr is a file (Slurm's --output)."""
    try:
        target = Path(os.readlink("/proc/self/fd/2"))
        return target if target.is_file() else None
    except OSError:
        return None


def _signal(name: str) -> int:
    name = name.removeprefix("SIG")
    return int(name) if name.isdigit() else int(signal.Signals[f"SIG{name}"])


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    missing = [k for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURMTRAIN_RUN_DIR", "SLURMTRAIN_TASK") if not env.get(k)]
    if missing:
        print(f"slurmtrain: error: python -m slurmtrain.job runs inside a job script; {', '.join(missing)} "
              "not set", file=sys.stderr)
        return 2
    stop = _signal(env.get("SLURMTRAIN_STOP_SIGNAL", "USR2"))
    # Before anything else: no signal is lost. SIGCHLD only wakes the loop when srun ends.
    clock = Signals(sorted({stop, signal.SIGTERM, signal.SIGCHLD}))
    run_dir = Path(env["SLURMTRAIN_RUN_DIR"])
    cfg = Config(run_dir=run_dir, stop_signal=stop, stop_timeout=args.stop_timeout, max_requeues=args.max_requeues,
                 restarts_in_job=args.restarts_in_job, hang_timeout=args.hang_timeout,
                 rendezvous_timeout=args.rendezvous_timeout, requeue_always=args.requeue_when == "always",
                 bad_node_hours=args.bad_node_hours, preflight=args.preflight, spare_nodes=args.spare_nodes,
                 straggler_pct=args.straggler_pct, warning_seconds=args.warning_seconds)
    job = Job.from_env(env)
    adopt(run_dir, job, Slurm(job.ref), _batch_log(), env)  # a script given to sbatch by hand: a run too
    launch = Launch(args.launcher, args.procs_per_node, run_dir, tuple(args.srun_options),
                    env["SLURMTRAIN_TASK"], env.get("SLURMTRAIN_GATE", ""),
                    {heartbeat.ENV: str(heartbeat.folder(run_dir, job.job_id))})
    return Supervisor(cfg, job, Slurm(job.ref), clock, launch, batch_log=_batch_log()).run()


if __name__ == "__main__":
    sys.exit(main())
