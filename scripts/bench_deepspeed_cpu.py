"""Steps per second and peak memory of the DeepSpeed engine's ZeRO stages against the
FSDP2 engine, same recipe and global batch, 2 processes under torchrun (gloo) on CPU.

Each engine trains ``--steps`` steps with log_steps = 1; the median ``step_time`` after the
first ``--warmup`` steps is reported, with the ratio to FSDP2 measured in the same round.
Engines alternate over ``--rounds`` rounds so other load hits all alike. Peak memory is
the trainer's ``peak_mem`` (rank 0's peak RSS; the ranks hold the same shares).

    python scripts/bench_deepspeed_cpu.py [--steps 30] [--rounds 2] [--wide]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from cpu_bench import WIDE, header, recipe, run_trainer, write_corpus

ENGINES = {"FSDP2": [], **{f"ZeRO-{s}": ["--set", "train.engine=deepspeed", "--set",
                                         f"deepspeed.config=zero{s}"] for s in (1, 2, 3)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--wide", action="store_true", help="dim 256, 4 blocks instead of tiny")
    a = ap.parse_args()
    print(header(f"{a.steps} steps x {a.rounds} rounds, model {'wide' if a.wide else 'tiny'}"))
    times: dict[str, list[float]] = {k: [] for k in ENGINES}
    ratios: dict[str, list[float]] = {k: [] for k in ENGINES}
    mem: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_corpus(work / "corpus.jsonl", n_docs=400)
        (work / "recipe.toml").write_text(recipe(WIDE if a.wide else "", a.steps,
                                                 global_batch=16, micro_batch=4))
        for r in range(a.rounds):
            this: dict[str, float] = {}
            for name, extra in ENGINES.items():
                recs = run_trainer(work, f"{name}-{r}", extra, 2)
                this[name] = statistics.median(x["step_time"] for x in recs[a.warmup:])
                times[name].append(this[name])
                mem[name] = max(mem.get(name, 0.0), recs[-1]["peak_mem"])
            for name in ENGINES:
                ratios[name].append(this["FSDP2"] / this[name])
    print("| engine | steps/s (median) | vs FSDP2, same round (median) | peak RSS rank 0, GiB |")
    print("|---|---|---|---|")
    for name in ENGINES:
        print(f"| {name} | {1 / statistics.median(times[name]):.2f} | "
              f"{statistics.median(ratios[name]):.2f}x | {mem[name]:.3f} |")


if __name__ == "__main__":
    main()
