"""Helpers for the survival tests: submit through the real CLI to the sandbox, wait on
events.jsonl, take nodes away with jobs on the `high` partition, release requeued jobs.

Every wait follows progress (tests/waiting.py): it fails when the run has not moved (no
new event, metrics line or log output, no change of the job's state in Slurm) for
``waiting.STALL_S`` seconds, or after ``waiting.CAP_S``, never because a loaded machine
took longer than a fixed total. It fails with the run's events and the tail of its
batch log. The ``timeout`` arguments say how long a wait takes on a quiet machine; they
no longer bound it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import slurm_hold
import waiting
from machines import kill_machine  # noqa: F401  (the survival tests take it from here)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Small and fast: one process per node (2 ranks on 2 nodes), tiny-demo without evaluation.
# The test that measures the steps' speed (stragglers) computes every step in full.
TRAIN_COMPUTING = ["python3", "-m", "slurmtrain.train", "--recipe", "tiny-demo", "--eval-steps", "0",
                   "--log-steps", "10"]
# The others inject faults between steps: a quarter of the tokens (global batch 8 of 64
# tokens: one micro-batch of 4 a rank, no accumulation) at a quarter of the CPU, each step
# paced to at least 0.3 s (debug.step_seconds), about what a full step took on the loaded
# machine, so that the room between a save and the next fault stays what it was.
TRAIN = TRAIN_COMPUTING + ["--set", "data.max_seq_len=64", "--set", "train.global_batch_size=8",
                           "--set", "debug.step_seconds=0.3"]
PROFILE_SETS = ["--set", "launch.procs_per_node=1", "--set", "resilience.rendezvous_timeout=60"]
# The srun launcher (no agent between srun and the rank) unless a test names a profile (its
# launcher) or TORCHRUN: the supervisor's handling of a fault is alike under each launcher,
# and a torchrun agent costs each node and launch an import of torch (3 CPU-s: CI's largest
# cost). The tests about torchrun's part (the stop window it gives its workers, its agents
# on a lost link, the Hugging Face script under it) name it.
SRUN = ["--launcher", "srun"]
TORCHRUN = ["--launcher", "torchrun"]


def run_cli(args: list[str], cwd: Path, check: bool = True, timeout: float = 120,
            follow: Path | None = None) -> subprocess.CompletedProcess:
    """``slurmtrain ARGS`` in a subprocess. With ``follow`` (a run directory) a long command
    (``resubmit --watch``) may run as long as that run progresses; ``timeout`` then only
    says how long it takes on a quiet machine."""
    argv = [sys.executable, "-m", "slurmtrain", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if follow is not None:
        proc = waiting.run(argv, f"slurmtrain {' '.join(args)}", [follow / "events.jsonl", follow / "logs"],
                           cwd=cwd, env=env)
    else:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"slurmtrain {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def submit(runs_dir: Path, cwd: Path, options: list[str], command: list[str]) -> tuple[Path, str]:
    """`slurmtrain submit` -> (run directory, job id)."""
    launcher = [] if "--profile" in options else SRUN
    out = run_cli(["submit", "--runs-dir", str(runs_dir), *launcher, *PROFILE_SETS, *options, "--", *command],
                  cwd=cwd).stdout
    job_id = re.search(r"submitted job (\d+)", out)[1]
    run = Path(re.search(r"run directory: (\S+)", out)[1])
    return run, job_id


def slurm(*argv: str, check: bool = True) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def job_field(job_id: str, key: str) -> str | None:
    return job_fields(job_id, (key,))[0]


def job_fields(job_id: str, keys: tuple[str, ...]) -> tuple[str | None, ...]:
    """KEYS of the job from one `scontrol show job` (each poll of a wait asks this)."""
    out = slurm("scontrol", "-o", "show", "job", str(job_id), check=False)
    found = [re.search(rf"\b{key}=(\S*)", out) for key in keys]
    return tuple(m[1] if m else None for m in found)


def cancel(job_id: str) -> None:
    """Cancel for good (not requeueable first: the script requeues on SIGTERM)."""
    slurm("scontrol", "update", f"JobId={job_id}", "Requeue=0", check=False)
    slurm("scancel", str(job_id), check=False)


def events(run: Path) -> list[dict]:
    """The run's events (slurmtrain.events.read: a line being written is skipped, not fatal)."""
    from slurmtrain import events as events_mod

    return events_mod.read(run)


def named(run: Path, name: str) -> list[dict]:
    return [e for e in events(run) if e.get("event") == name]


def release_requeued(job_id: str) -> None:
    """Start ``job_id`` now if it is held after a requeue (tests/slurm_hold.py; the lane's
    thread does it for every job, this is for a wait that must not depend on its poll)."""
    for held_id, requeued in slurm_hold.held():
        if held_id == str(job_id) and time.time() - requeued >= slurm_hold.RELEASE_AFTER_S:
            slurm_hold.release(held_id)


def describe(run: Path) -> str:
    log = sorted((run / "logs").glob("job-*.out"))
    tail = "\n".join(log[-1].read_text(errors="replace").splitlines()[-30:]) if log else "(no batch log)"
    evs = "\n".join(json.dumps(e) for e in events(run))
    nodes = "".join(f"\n{p.name} tail:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                    for p in sorted((run / "logs").glob("*.out")) if not p.name.startswith("job-"))
    return f"events.jsonl of {run}:\n{evs}\nbatch log tail:\n{tail}{nodes}"


def progress(run: Path, job_id: str | None = None) -> tuple:
    """What moves while a run makes progress: the files in its directory (events, metrics,
    a program's own), its logs, and Slurm's state of its job."""
    top = [p for p in run.iterdir() if p.is_file()] if run.is_dir() else []  # events, metrics, a program's own
    files = waiting.files_fingerprint(*top, run / "logs")
    job = job_fields(job_id, ("JobState", "Restarts", "Reason")) if job_id else ()
    return files, job


def wait_until(run: Path, what: str, pred, timeout: float = 120, job_id: str | None = None, poll: float = 1.0):
    """Poll ``pred()`` until it is truthy and return its value; release the requeued job
    on the way. Fails only when the run stops progressing (see the module's docstring);
    ``timeout`` is how long it takes on a quiet machine, for the reader."""
    return waiting.wait_for(what, pred, lambda: progress(run, job_id), poll=poll, details=lambda: describe(run),
                            on_poll=(lambda: release_requeued(job_id)) if job_id else None)


def job_ended(job_id: str) -> str | None:
    """Slurm's final state of the job once it has ended for good, else None. Judged by
    slurmtrain's own state table: Slurm shows transient states beyond PENDING/RUNNING
    (SIGNALING at the end of a job on a loaded machine, REQUEUE_HOLD, STAGE_OUT...)."""
    from slurmtrain.runs.states import parse_state

    state = job_field(job_id, "JobState")
    return state if state and parse_state(state).is_final else None


def wait_job_gone(job_id: str, run: Path, timeout: float = 300) -> str:
    """Wait until the job has ended for good (not queued, running or coming back); its state."""
    return wait_until(run, f"job {job_id} to end", lambda: job_ended(job_id), timeout, job_id=job_id)


def take_all_nodes(seconds: int) -> str:
    """A job on the `high` partition that needs every CPU of both nodes: it preempts `low`."""
    out = slurm("sbatch", "--parsable", "-p", "high", "-N", "2", "--ntasks-per-node=4", "-J", "preemptor",
                "-o", "/dev/null", "--wrap", f"sleep {seconds}")
    return out.strip().split(";")[0]


def resumes_where_it_stopped(run) -> list[tuple[int, int]]:
    """(last step saved or reached before each stop, step resumed from after it). A resume
    from a copy in node memory (train.memory_steps) counts as from that step's save."""
    pairs, last = [], None
    for e in events(run):
        if e["event"] in ("stopped", "checkpoint_saved"):
            last = e["step"]
        elif e["event"] == "resumed":
            if e.get("tier") == "memory":
                assert last is None or e["step"] >= last, f"memory copy {e['step']} older than save {last}"
                last = e["step"]
            pairs.append((last, e["step"]))
    return pairs


def assert_same_weights(run: Path, ref: subprocess.Popen, ref_dir: Path) -> None:
    """The run's final weights are bitwise those of the uninterrupted reference run ``ref``
    (started beside it, writing to ``ref_dir``), once that has finished."""
    _, err = waiting.communicate(ref, "the uninterrupted reference run", [ref_dir])
    assert ref.returncode == 0, err[-3000:]
    from slurmtrain.train.engines import load_consolidated
    _, got = load_consolidated(run)
    _, want = load_consolidated(ref_dir)
    assert got.keys() == want.keys()
    different = [k for k in want if not (got[k].dtype == want[k].dtype and got[k].equal(want[k]))]
    assert not different, f"parameters differ from the uninterrupted run: {different}"


class Reference:
    """An uninterrupted run of the built-in trainer (``train``: its argv, 2 ranks on this
    machine), started once beside the jobs of a module; the runs it is compared with end
    with bitwise its weights."""

    def __init__(self, workdir: Path, train: list[str], name: str):
        self.dir = workdir / name
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      "--nproc-per-node", "2", *train[1:], "--run-dir", str(self.dir)], cwd=workdir,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.checked = False

    def assert_same_weights(self, run: Path) -> None:
        if not self.checked:  # the first caller waits for it and checks its exit
            assert_same_weights(run, self.proc, self.dir)
            self.checked = True
            return
        from slurmtrain.train.engines import load_consolidated
        _, got = load_consolidated(run)
        _, want = load_consolidated(self.dir)
        assert all(got[k].equal(want[k]) for k in want) and got.keys() == want.keys()


def shared_reference(workdir: Path, train: list[str], name: str):
    """A module's one Reference, for a fixture to ``yield from``: killed at the end if it
    still runs (a failed test may never have waited for it)."""
    ref = Reference(workdir, train, name)
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def rank_pids(run: Path, program: str = "slurmtrain.train") -> list[int]:
    """The pids of the run's ranks of ``program`` (a module or script named in their argv;
    not the torchrun agents, whose argv names it too), on every node of the sandbox (one
    machine)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if program.encode() not in argv or b"torch.distributed.run" in argv:
                continue
            if f"SLURMTRAIN_RUN_DIR={run}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return sorted(found)


def rank_of(pid: int) -> tuple[str, str]:
    """(global rank, node) of a rank's process, from its environment."""
    env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
    return env[b"RANK"].decode(), env[b"SLURMD_NODENAME"].decode()


def stop_until_hang(run: Path, victim: int, job_id: str, timeout: float = 90) -> float:
    """SIGSTOP the rank ``victim`` (a pid) and wait until the supervisor records a hang;
    SIGCONT it whatever happens (the relaunch ends it). The wall-clock time of the SIGSTOP."""
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.time()
    try:
        wait_until(run, "the hang to be seen", lambda: named(run, "hang"), timeout, job_id)
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return stopped_at


def hf_steps(run: Path) -> list[dict]:
    """The optimizer steps hf_clm.py's rank 0 finished, in order ({"step", "job_restart"})."""
    path = run / "hf_steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_nothing_lost(run) -> None:
    for reached, resumed in resumes_where_it_stopped(run):
        # The step in flight when the stop came is finished and saved: nothing is lost.
        assert resumed == reached, f"resumed at {resumed} after reaching step {reached}\n{describe(run)}"
