"""Helpers for the trainer's end-to-end tests: a learnable corpus, a small recipe, and
``python -m slurmtrain.train`` in a subprocess (several ranks through spawn_ranks.py, or torchrun)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORDS = "the quick brown fox jumps over the lazy dog while a cat sleeps on a warm mat".split()

RECIPE = """\
[model]
preset = "tiny"

[data]
path = "corpus.jsonl"
max_seq_len = 64
val_fraction = 0.05

[train]
steps = {steps}
global_batch_size = 8
micro_batch_size = 2
lr = 3e-3
warmup_steps = 3
min_lr = 3e-4
weight_decay = 0.01
log_steps = 1
eval_steps = 10
eval_batches = 2
save_steps = {save_steps}
"""


def write_corpus(path: Path, n_docs: int = 200) -> Path:
    """Word cycles: easy to learn, so the loss falls within a few dozen steps."""
    with path.open("w") as fh:
        for i in range(n_docs):
            text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(40))
            fh.write(json.dumps({"text": text}) + "\n")
    return path


def setup_run(tmp: Path, steps: int = 20, save_steps: int = 0) -> Path:
    """A work dir holding corpus.jsonl and recipe.toml; returns the recipe's path."""
    tmp.mkdir(parents=True, exist_ok=True)
    write_corpus(tmp / "corpus.jsonl")
    recipe = tmp / "recipe.toml"
    recipe.write_text(RECIPE.format(steps=steps, save_steps=save_steps))
    return recipe


def fsdp2_reference(tmp_path_factory) -> tuple[Path, str]:
    """(run directory, rank 0's output) of the FSDP2 run that several files compare with:
    :func:`setup_run`'s recipe, 20 steps, two ranks under the real torchrun. Run once per test
    session: under xdist the files run in different workers, so the first to ask runs it
    under a lock in the session's shared temporary directory and the others wait for it
    (each start of the trainer costs ~10 CPU-s on this suite's 2 cores)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "fsdp2-reference"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = root / "stdout.txt"
        if not out.exists():
            recipe = setup_run(root / "work", steps=20)
            # The real torchrun here (elsewhere the suite starts ranks with spawn_ranks.py).
            proc = train(["--recipe", str(recipe), "--run-dir", "run"], root / "work", nproc=2,
                         torchrun=True)
            assert proc.returncode == 0, show(proc)
            out.write_text(proc.stdout)
    return root / "work" / "run", out.read_text()


# ATen's CPU kernels that every x86 processor runs alike (ATEN_CPU_CAPABILITY): for numbers
# recorded on one machine and checked on another (fixtures/checkpoints-0.x/record.py).
PORTABLE_KERNELS = "default"


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("SLURMTRAIN_")}
    out.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **extra)
    return out


def command(args: list[str], nproc: int = 1, torchrun: bool = False, fork: bool = True) -> list[str]:
    """The trainer's command line: its ``nproc`` ranks forked by this process's
    ``rank_server.py``, which has imported the trainer already (through ``spawn_ranks.py``:
    torchrun's environment and failure handling, one rank's own exit status), or with
    ``fork=False`` started as ``python -m slurmtrain.train`` (several through spawn_ranks.py),
    or through torchrun itself with ``torchrun=True``."""
    trainer = [sys.executable, "-m", "slurmtrain.train", *args]
    if torchrun:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={nproc}", *trainer[1:]]
    spawn = [sys.executable, str(Path(__file__).with_name("spawn_ranks.py"))]
    if fork:
        return [*spawn, "--server", rank_server(), str(nproc), *trainer]
    return trainer if nproc == 1 else [*spawn, str(nproc), *trainer]


_SERVER: tuple[subprocess.Popen, str] | None = None


def rank_server() -> str:
    """The socket of this process's rank_server.py, started on first use (~5 CPU-s of
    imports, once) and ended with this process."""
    global _SERVER
    if _SERVER is None or _SERVER[0].poll() is not None:
        import atexit
        import shutil
        import tempfile
        import time
        folder = tempfile.mkdtemp(prefix="rank-server-")
        path = os.path.join(folder, "sock")
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("rank_server.py")), path],
                                env=env(), stdin=subprocess.DEVNULL)
        atexit.register(shutil.rmtree, folder, True)  # runs after the kill below (atexit is LIFO)
        atexit.register(proc.kill)
        deadline = time.monotonic() + 300
        while not os.path.exists(path):
            assert proc.poll() is None, f"rank_server.py exited {proc.returncode} before it was ready"
            assert time.monotonic() < deadline, "rank_server.py not ready after 300 s"
            time.sleep(0.05)
        _SERVER = (proc, path)
    return _SERVER[1]


def train(args: list[str], cwd: Path, nproc: int = 1, timeout: float = 180, torchrun: bool = False,
          fork: bool = True, **extra_env: str) -> subprocess.CompletedProcess:
    """The trainer in a subprocess (``nproc`` > 1 ranks as :func:`command` starts them),
    output captured.

    Killed and failed only when it stops progressing: no output and no change to the files
    under ``cwd`` (metrics, checkpoints, events) for ``waiting.STALL_S`` seconds
    (tests/waiting.py). ``timeout`` is how long it takes on a quiet machine, for the reader."""
    import waiting

    return waiting.run(command(args, nproc, torchrun, fork), f"trainer {' '.join(args)}", [cwd], cwd=cwd, env=env(**extra_env))


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records(run_dir) if "loss" in r}


def events(run_dir: Path) -> list[tuple[str, int | None]]:
    from slurmtrain import events as ev
    return [(e["event"], e.get("step")) for e in ev.read(run_dir)]


def show(proc: subprocess.CompletedProcess) -> str:
    """For assertion messages: what the run printed."""
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-12000:]}"


def rank_exit_codes(proc: subprocess.CompletedProcess) -> set[int]:
    """The trainer processes' exit codes: torchrun (and spawn_ranks.py) itself exits 1
    whenever a rank exits non-zero, and lists each failed rank's own code in its report."""
    import re
    codes = {int(c) for c in re.findall(r"exitcode\s*:\s*(-?\d+)", proc.stderr)}
    return codes or {proc.returncode}


@contextlib.contextmanager
def one_rank(tmp: Path):
    """A one-process world in ``tmp``, the process's signal handlers and cwd given back."""
    from slurmtrain.train.distributed import close_world, init_world

    saved_env = {k: os.environ.pop(k, None) for k in ("RANK", "WORLD_SIZE")}
    os.environ["SLURMTRAIN_STOP_FILE"] = str(tmp / ".stop-absent")
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    cwd = os.getcwd()
    os.chdir(tmp)
    world = init_world()
    try:
        yield world
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        close_world()
        os.chdir(cwd)
        os.environ.pop("SLURMTRAIN_STOP_FILE", None)
        os.environ.update({k: v for k, v in saved_env.items() if v is not None})
