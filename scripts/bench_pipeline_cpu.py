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
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "train"))

from trainer_util import write_corpus  # noqa: E402

RECIPE = """\
[model]
preset = "tiny"
{model}
[data]
path = "corpus.jsonl"
max_seq_len = 128
val_fraction = 0.0

[train]
steps = {steps}
global_batch_size = 32
micro_batch_size = 2
log_steps = 1
"""

MODELS = {"tiny": "", "wide (dim 256, 4 blocks)": "dim = 256\nn_layers = 4\nffn_dim = 688\n"}
LAYOUTS = {"1 stage x 4 ranks": [], "2 stages x 2 ranks (1F1B)": ["--set", "pipeline.stages=2"]}


def run(work: Path, name: str, extra: list[str], threads: int) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
           "-m", "slurmtrain.train", "--recipe", "recipe.toml", "--run-dir", name, *extra]
    subprocess.run(cmd, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    lines = (work / name / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"OMP_NUM_THREADS={a.threads}, {a.steps} steps x {a.rounds} rounds")
    print("| model | layout | steps/s (median) | bubble, measured | bubble, theoretical |")
    print("|---|---|---|---|---|")
    for model, extra_model in MODELS.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            write_corpus(work / "corpus.jsonl", n_docs=400)
            (work / "recipe.toml").write_text(RECIPE.format(model=extra_model, steps=a.steps))
            times: dict[str, list[float]] = {k: [] for k in LAYOUTS}
            bubble: dict[str, float | None] = {}
            measured: dict[str, list[float]] = {k: [] for k in LAYOUTS}
            for r in range(a.rounds):
                for layout, extra in LAYOUTS.items():
                    recs = run(work, f"{len(bubble)}-{r}-{hash(layout) & 0xffff}", extra, a.threads)
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
