"""Throughput of ``slurmtrain tokenize`` (MB/s, tokens/s) with 1 and 2 processes, against a
one-line baseline: the same tokenizer's ``encode_batch`` over the same file in one process.

The corpus is a jsonl file of text from this machine (``slurmtrain demo-corpus``: man pages,
docs, source), repeated to ``--mb`` MB; the tokenizer a byte-level BPE trained on it
(``--vocab``), saved as tokenizer.json. Everything runs single-threaded per process
(``TOKENIZERS_PARALLELISM=false``), so 2 processes use 2 cores. Rounds alternate
baseline, -j 1, -j 2; the minimum and median wall time are reported, and the minimum CPU
time (user + system, of the command and all its processes): on a shared, busy machine the
wall time of a second process mostly measures the other work, while the CPU time still
says how much work each command does (the 2-process command adds none if its CPU time
equals the 1-process one's).

    python scripts/bench_tokenize.py [--mb 40] [--rounds 3] [--vocab 8000]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}

BASELINE = ("import json, sys; from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[2]); "
            "print(sum(len(e.ids) for e in t.encode_batch("
            "[json.loads(l)['text'] for l in open(sys.argv[1], encoding='utf-8')], "
            "add_special_tokens=False)))")


def make_corpus(work: Path, mb: float, vocab: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(REPO))
    from slurmtrain.data.demo_corpus import write_demo_corpus
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    seed = work / "seed.jsonl"
    write_demo_corpus(seed, 8_000_000)
    corpus = work / "corpus.jsonl"
    data = seed.read_bytes()
    with corpus.open("wb") as fh:
        for _ in range(max(1, int(mb * 1e6 / len(data)))):
            fh.write(data)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(seed)], trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"],
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(work / "tokenizer.json"))
    return corpus, work / "tokenizer.json"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for children and theirs
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout + stderr)"""
    t, c = time.monotonic(), _cpu()
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return time.monotonic() - t, _cpu() - c, out.stdout + out.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=8000)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tokenize-"))
    try:
        corpus, tok = make_corpus(work, a.mb, a.vocab)
        size = corpus.stat().st_size
        # The parent's own CPU time (RUSAGE_SELF, its workers not included), printed at exit:
        # the serial part of a -j 2 run (start-up, planning, progress), beside the workers'.
        wrapper = ("import atexit, resource, sys; atexit.register(lambda: print('parent-cpu', "
                   "sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), file=sys.stderr)); "
                   "from slurmtrain.cli import main; main()")
        cli = [sys.executable, "-c", wrapper, "tokenize", str(corpus),
               "--tokenizer", str(tok), "--shard-mb", "4", "--progress-every", "60"]
        times: dict[str, list[float]] = {"baseline": [], "-j 1": [], "-j 2": []}
        cpu: dict[str, list[float]] = {k: [] for k in times}
        parent: dict[str, list[float]] = {"-j 1": [], "-j 2": []}
        tokens = 0
        for r in range(a.rounds):
            dt, dc, out = timed([sys.executable, "-c", BASELINE, str(corpus), str(tok)])
            times["baseline"].append(dt)
            cpu["baseline"].append(dc)
            tokens = int(out.split()[0])
            for j in (1, 2):
                shutil.rmtree(work / "out", ignore_errors=True)
                dt, dc, out = timed(cli + ["--out", str(work / "out"), "-j", str(j)])
                times[f"-j {j}"].append(dt)
                cpu[f"-j {j}"].append(dc)
                parent[f"-j {j}"].append(float(out.rsplit("parent-cpu ", 1)[1].split()[0]))
            print(f"round {r + 1} (load average {os.getloadavg()[0]:.1f}): "
                  + ", ".join(f"{k} {v[-1]:.2f} s ({cpu[k][-1]:.2f} s CPU)" for k, v in times.items()), flush=True)
        best = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        best_cpu = {k: min(v) for k, v in cpu.items()}
        print(f"corpus: {size / 1e6:.1f} MB jsonl, {tokens:,} tokens (vocab {a.vocab}); {a.rounds} rounds "
              f"(whole command, start-up included):")
        for k, v in best.items():
            print(f"  {k:9s} min {v:6.2f} s  {size / 1e6 / v:6.2f} MB/s  {tokens / v:12,.0f} tokens/s  "
                  f"median {med[k]:6.2f} s  min CPU {best_cpu[k]:6.2f} s")
        print(f"single-process overhead over the baseline: {best['-j 1'] / best['baseline'] - 1:+.1%} wall (min), "
              f"{best_cpu['-j 1'] / best_cpu['baseline'] - 1:+.1%} CPU (goal <= +10%); speed-up with 2 processes: "
              f"{best['-j 1'] / best['-j 2']:.2f}x wall (min; goal >= 1.7x); CPU of -j 2 over -j 1: "
              f"{best_cpu['-j 2'] / best_cpu['-j 1'] - 1:+.1%}")
        # What 2 idle cores would give if the workers split the work evenly: the parent's
        # CPU time in series, the workers' in parallel (a model from CPU times, not a measurement).
        # Paired within each round (the CPU time of the same work varies between rounds with
        # the load: caches, frequency), then the median over rounds.
        p2 = min(parent["-j 2"])
        models = [c1 / (p + (c2 - p) / 2) for c1, c2, p in zip(cpu["-j 1"], cpu["-j 2"], parent["-j 2"])]
        print(f"-j 2: parent process {p2:.2f} s CPU (min); CPU of -j 2 over -j 1 by round: "
              + ", ".join(f"{c2 / c1 - 1:+.1%}" for c1, c2 in zip(cpu["-j 1"], cpu["-j 2"]))
              + f"; on 2 idle cores that would be a {statistics.median(models):.2f}x speed-up, median of rounds "
              f"({', '.join(f'{m:.2f}' for m in models)}; a CPU-time model, not measured)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
