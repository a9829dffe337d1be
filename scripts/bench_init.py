"""What layout-independent initialisation costs, against torch's plain ``normal_``.

Every parameter's initial numbers are drawn in blocks of whole rows from generators seeded
by (seed, name, block) (``model.init_parameters``): a shard draws only the blocks its rows
touch. This times, on one CPU thread, for a preset's parameter shapes (built on the meta
device: nothing is allocated but what one rank would hold):

- the draw of the shard that rank 0 of ``--world`` FSDP2 ranks holds (dim-0 slices, as
  FSDP2 cuts them), for each world size asked; the world size 1 is the whole model;
- the baseline: ``torch.nn.init.normal_`` into tensors of those same shard shapes, from
  torch's global generator (what initialisation cost before, and what it would cost if
  layouts did not have to agree).

    python scripts/bench_init.py [--preset tinyllama-1.1b] [--world 1 8]

A world size whose shard would not fit in this machine's memory is left out (and said).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmtrain.train.model import (  # noqa: E402
    _RESIDUAL_OUTPUTS, canonical_name, meta_model, normal_rows)
from slurmtrain.recipes.presets import get_preset  # noqa: E402


def shard_rows(rows: int, world: int, rank: int = 0) -> tuple[int, int]:
    """(offset, count) of ``rank``'s dim-0 slice, as DTensor's Shard(0) cuts it."""
    per = math.ceil(rows / world)
    start = min(rows, per * rank)
    return start, min(rows, start + per) - start


def shapes(preset: str) -> list[tuple[str, tuple[int, ...], float]]:
    args = get_preset(preset)
    model = meta_model(args)
    out_std = args.init_std / math.sqrt(2 * args.n_layers)
    out = []
    for name, param in model.named_parameters():
        key = canonical_name(name)
        if key.endswith("norm.weight"):
            continue  # ones: no draw
        std = out_std if key.endswith(_RESIDUAL_OUTPUTS) else args.init_std
        out.append((key, tuple(param.shape), std))
    return out


def time_ours(params, world: int) -> float:
    start = time.perf_counter()
    for name, shape, std in params:
        offset, count = shard_rows(shape[0], world)
        local = (count, *shape[1:])
        normal_rows(0, name, shape, std, (offset,) + (0,) * (len(shape) - 1), local)
    return time.perf_counter() - start


def time_plain(params, world: int) -> float:
    torch.manual_seed(0)
    start = time.perf_counter()
    for _, shape, std in params:
        _, count = shard_rows(shape[0], world)
        torch.nn.init.normal_(torch.empty((count, *shape[1:])), 0.0, std)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="tinyllama-1.1b")
    p.add_argument("--world", type=int, nargs="+", default=[1, 8])
    a = p.parse_args()
    torch.set_num_threads(1)
    params = shapes(a.preset)
    total = sum(math.prod(s) for _, s, _ in params)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    print(f"{a.preset}: {total / 1e9:.2f} B drawn numbers, torch {torch.__version__}, 1 thread")
    for world in a.world:
        largest = max(math.prod((shard_rows(s[0], world)[1], *s[1:])) for _, s, _ in params)
        if largest * 4 * 3 > memory:
            print(f"world {world}: left out (a shard of {largest * 4 / 2**30:.1f} GiB would not fit)")
            continue
        ours, plain = time_ours(params, world), time_plain(params, world)
        print(f"world {world}: rank 0 draws {total / world / 1e9:.2f} B numbers: "
              f"layout-independent {ours:.2f} s, plain normal_ {plain:.2f} s, "
              f"ratio {ours / plain:.2f}", flush=True)


if __name__ == "__main__":
    main()
