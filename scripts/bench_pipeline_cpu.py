"""Steps per second of the trainer at 2 pipeline stages x 2 data-parallel ranks against
1 stage x 4 ranks (plain FSDP2), same recipe and global batch, on CPU under torchrun (gloo),
for ``tiny`` and a wider CPU-sized model; with the schedule's theoretical bubble.

Each layout trains ``--steps`` steps with log_steps = 1 (so ``step_time`` is per step);
the median step time after the first ``--warmup`` steps is reported. Layouts alternate
over ``--rounds`` rounds so that other load on the machine hits both alike. The bubble
columns: the trainer's measured ``bubble`` (median over the timed steps) and the
schedule's (p - 1) / (m + p - 1).

    python scripts/bench_pipeline_cpu.py [--steps 30] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from cpu_bench import WIDE, header, recipe, run_trainer, write_corpus

MODELS = {"tiny": "", "wide (dim 256, 4 blocks)": WIDE}
LAYOUTS = {"1 stage x 4 ranks": [], "2 stages x 2 ranks (1F1B)": ["--set", "pipeline.stages=2"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    print(header(f"OMP_NUM_THREADS={a.threads}, {a.steps} steps x {a.rounds} rounds"))
    print("| model | layout | steps/s (median) | bubble, measured | bubble, theoretical |")
    print("|---|---|---|---|---|")
    for model, extra_model in MODELS.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            write_corpus(work / "corpus.jsonl", n_docs=400)
            (work / "recipe.toml").write_text(recipe(extra_model, a.steps, global_batch=32, micro_batch=2))
            times: dict[str, list[float]] = {k: [] for k in LAYOUTS}
            bubble: dict[str, float | None] = {}
            measured: dict[str, list[float]] = {k: [] for k in LAYOUTS}
            for r in range(a.rounds):
                for layout, extra in LAYOUTS.items():
                    recs = run_trainer(work, f"{len(bubble)}-{r}-{hash(layout) & 0xffff}", extra, 4, a.threads)
                    times[layout] += [x["step_time"] for x in recs[a.warmup:]]
                    bubble[layout] = recs[-1].get("bubble_theoretical")
                    measured[layout] += [x["bubble"] for x in recs[a.warmup:] if "bubble" in x]
            for layout in LAYOUTS:
                b, m = bubble[layout], measured[layout]
                print(f"| {model} | {layout} | {1 / statistics.median(times[layout]):.2f} | "
                      f"{f'{statistics.median(m):.3f}' if m else '-'} | "
                      f"{'-' if b is None else f'{b:.3f}'} |", flush=True)


if __name__ == "__main__":
    main()
