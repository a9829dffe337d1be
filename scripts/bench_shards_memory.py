"""Peak RSS and time to the first step of the trainer on a big tokenized corpus vs a small one.

Writes two synthetic tokenized corpora in the format of ``slurmtrain tokenize``
(``slurmtrain/data/shards.py``; random byte-level tokens, documents of 200 to 2000 tokens):
a small one (``--small-mb``, default 20 MB of shards) and a big one (``--big-gb``, default
2.1 GB), then runs the trainer (``tiny-demo`` recipe, one process, a few steps) on each,
alternating, and reports each run's peak RSS (the process's ``VmHWM``, polled) and the time from start to the first
metrics line. The corpora are written under ``--dir`` (default: a temporary folder, removed).

    python scripts/bench_shards_memory.py [--big-gb 2.1] [--small-mb 20] [--rounds 2] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmtrain.data import shards  # noqa: E402
from slurmtrain.data.tokenizer import ByteTokenizer  # noqa: E402

SHARD_TOKENS = 128 << 20  # 256 MB of uint16 per shard


def synthetic_corpus(out: Path, n_bytes: int, seed: int = 0) -> dict:
    """Random tokens in documents [BOS] ... [EOS], written shard by shard (bounded memory)."""
    tok = ByteTokenizer()
    rng = np.random.default_rng(seed)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    n_tokens, entries, k = n_bytes // 2, [], 0
    while sum(e["tokens"] for e in entries) < n_tokens:
        want = min(SHARD_TOKENS, n_tokens - sum(e["tokens"] for e in entries))
        lengths = rng.integers(200, 2000, size=want // 200 + 2)
        ends = np.cumsum(lengths)
        ends = ends[: int(np.searchsorted(ends, want)) + 1]
        ends[-1] = want
        toks = rng.integers(0, 256, size=want, dtype=np.uint16)
        toks[np.concatenate([[0], ends[:-1]])] = tok.bos_id
        toks[ends - 1] = tok.eos_id
        name = f"{k:05d}"
        toks.tofile(out / "shards" / f"{name}.bin")
        ends.astype(np.int64).tofile(out / "shards" / f"{name}.idx")
        entries.append({"name": name, "input": 0, "start": 0, "end": -1, "docs": len(ends),
                        "tokens": int(want)})
        k += 1
    index = {"format": shards.FORMAT, "version": shards.VERSION, "dtype": "uint16",
             "tokenizer": shards.tokenizer_identity(tok), "field": "text",
             "inputs": [{"path": "synthetic", "size": 0, "mtime": 0}], "shards": entries,
             "n_docs": sum(e["docs"] for e in entries), "n_tokens": sum(e["tokens"] for e in entries),
             "n_skipped": 0, "skipped": []}
    shards.write_json(out / "index.json", index)
    return index


def run_trainer(data: Path, work: Path, steps: int) -> tuple[float, float, list[float]]:
    """(peak RSS in MB, seconds from start to the first metrics line with a loss, step times
    after the first)."""
    run_dir = work / f"run-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "slurmtrain.train", "--recipe", "tiny-demo", "--data-path", str(data),
           "--run-dir", str(run_dir), "--train-steps", str(steps), "--log-steps", "1",
           "--save-steps", "0", "--eval-steps", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = None
    metrics = run_dir / "metrics.jsonl"
    hwm = 0
    while proc.poll() is None:
        # VmHWM: the trainer process's own peak RSS (wait4's ru_maxrss would also count
        # any child it ran)
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            hwm = max(hwm, int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1]))
        except (OSError, StopIteration):
            pass
        if first is None and metrics.exists() and any(
                "loss" in json.loads(line) for line in metrics.read_text().splitlines()):
            first = time.monotonic() - t0
        time.sleep(0.02)
    err = proc.stderr.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed on {data}:\n{err[-3000:]}")
    steps_s = [m["step_time"] for m in map(json.loads, metrics.read_text().splitlines())
               if "step_time" in m and m["step"] > 1]
    return hwm / 1024, first if first is not None else float("nan"), steps_s


def data_seconds_per_step(data: Path, steps: int = 100) -> float:
    """What the trainer's data path costs per step for tiny-demo (world 1: 4 micro-batches
    of 4 x 257 tokens), measured alone: sequences from the memory-mapped shards to tensors."""
    from slurmtrain.train import data as data_mod
    c = data_mod.load_corpus(data, ByteTokenizer(), 256, 0.01, 0, "bench")
    stream = data_mod.TrainStream(c.train, 0, 0, 1, 4)
    stream.next_step(4)  # the epoch's permutation
    blocks = []
    for _ in range(5):  # the median of 5 blocks: other programs' load comes in bursts
        t = time.perf_counter()
        for _ in range(steps):
            stream.next_step(4)
        blocks.append((time.perf_counter() - t) / steps)
    return statistics.median(blocks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big-gb", type=float, default=2.1)
    ap.add_argument("--small-mb", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dir", type=Path, default=None,
                    help="write the corpora here and keep them (default: a temporary folder)")
    a = ap.parse_args()
    base = a.dir or Path(tempfile.mkdtemp(prefix="bench-shards-"))
    try:
        t = time.monotonic()
        small, big = (shards.read_index(base / n, "bench") if (base / n / "index.json").exists()
                      else synthetic_corpus(base / n, int(size))
                      for n, size in (("small", a.small_mb * 1e6), ("big", a.big_gb * 1e9)))
        print(f"corpora: small {small['n_tokens'] * 2 / 1e6:.0f} MB ({small['n_tokens']:,} tokens), "
              f"big {big['n_tokens'] * 2 / 1e9:.2f} GB ({big['n_tokens']:,} tokens, "
              f"{len(big['shards'])} shards), written in {time.monotonic() - t:.0f} s", flush=True)
        res: dict[str, list[tuple[float, float, list[float]]]] = {"small": [], "big": []}
        for r in range(a.rounds):
            for name in ("small", "big"):
                res[name].append(run_trainer(base / name, base, a.steps))
                print(f"round {r + 1} {name}: peak RSS {res[name][-1][0]:.0f} MB, first step after "
                      f"{res[name][-1][1]:.2f} s", flush=True)
        rss = {k: statistics.median(x[0] for x in v) for k, v in res.items()}
        first = {k: statistics.median(x[1] for x in v) for k, v in res.items()}
        print(f"median peak RSS: small {rss['small']:.0f} MB, big {rss['big']:.0f} MB: "
              f"{rss['big'] / rss['small']:.3f}x (goal <= 1.10x)")
        print(f"median time to first step: small {first['small']:.2f} s, big {first['big']:.2f} s: "
              f"{first['big'] / first['small']:.2f}x (goal <= 2x)")
        step = statistics.median(t for x in res["big"] for t in x[2])
        load = data_seconds_per_step(base / "big")
        print(f"data loading on the big corpus: {load * 1e3:.2f} ms per step, median step "
              f"{step * 1e3:.1f} ms: {load / step:.2%} of a step (goal < 2%)")
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
