"""Throughput of ``slurmtrain tokenize`` (MB/s, tokens/s) with 1 and 2 processes, against a
one-line baseline: the same tokenizer's ``encode_batch`` over the same file in one process.

The corpus is a jsonl file of text from this machine (``slurmtrain demo-corpus``: man pages,
docs, source), repeated to ``--mb`` MB; the tokenizer a byte-level BPE trained on it
(``--vocab``), saved as tokenizer.json. Everything runs single-threaded per process
(``TOKENIZERS_PARALLELISM=false``), so 2 processes use 2 cores. Rounds alternate
baseline, -j 1, -j 2; medians are reported.

    python scripts/bench_tokenize.py [--mb 40] [--rounds 3] [--vocab 8000]
"""

from __future__ import annotations

import argparse
import os
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
    from slurmtrain.train.demo_corpus import write_demo_corpus
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


def timed(cmd: list[str]) -> tuple[float, str]:
    t = time.monotonic()
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return time.monotonic() - t, out.stdout


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
        cli = [sys.executable, "-c", "from slurmtrain.cli import main; main()", "tokenize", str(corpus),
               "--tokenizer", str(tok), "--shard-mb", "4", "--progress-every", "60"]
        times: dict[str, list[float]] = {"baseline": [], "-j 1": [], "-j 2": []}
        tokens = 0
        for r in range(a.rounds):
            dt, out = timed([sys.executable, "-c", BASELINE, str(corpus), str(tok)])
            times["baseline"].append(dt)
            tokens = int(out.strip())
            for j in (1, 2):
                shutil.rmtree(work / "out", ignore_errors=True)
                times[f"-j {j}"].append(timed(cli + ["--out", str(work / "out"), "-j", str(j)])[0])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
                  flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"corpus: {size / 1e6:.1f} MB jsonl, {tokens:,} tokens (vocab {a.vocab}); medians of "
              f"{a.rounds} (whole command, start-up included):")
        for k, v in med.items():
            print(f"  {k:9s} {v:6.2f} s  {size / 1e6 / v:6.2f} MB/s  {tokens / v:12,.0f} tokens/s")
        print(f"single-process overhead over the baseline: {med['-j 1'] / med['baseline'] - 1:+.1%} "
              f"(goal <= +10%); speed-up with 2 processes: {med['-j 1'] / med['-j 2']:.2f}x "
              f"(goal >= 1.7x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
