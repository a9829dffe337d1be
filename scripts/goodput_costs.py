#!/usr/bin/env python3
"""The costs of scripts/sim_goodput.py, from the save and load benchmarks, scaled to a model
and a job size: the measured rates stay, the bytes grow.

    python scripts/goodput_costs.py [--params 405e9] [--gpus 16384] [--save FILE] [--load FILE]
                                    [--out costs.json]
    python scripts/sim_goodput.py --costs-json costs.json

The model (each line is printed with the costs, marked measured or assumed):

* the state a GPU holds, and saves: 12 bytes a parameter (fp32 weights and AdamW's two
  moments), sharded over every GPU of the job;
* a background save stalls for its device-to-host copy: that GPU's bytes at the rate
  ``bench_save.py --gpu`` measured (the checkpoint's size over the async stall);
* a copy in node memory (``train.memory_steps``) stalls for the same copy: the loop waits
  while the state is copied to host memory (on a GPU, the device-to-host copy; on the CPU
  ``bench_load.py`` measured it, "copy, the call"); its serialization, the write to /dev/shm
  and the send to the peer node run in a thread beside the steps (assumed free: a GPU node's
  CPU cores are mostly idle; on the 2-core CPU machine, where the thread shares the cores
  with the ranks, they still cost about two thirds of waiting for them, bench_load's "copy,
  beside the steps");
* an in-job restart loads from a peer's copy at the rate ``bench_load.py`` measured for it
  (the slower of the two: a lost node's ranks wait for the peer);
* a restart after a requeue loads the durable checkpoint: a rank's bytes at the rate of
  ``bench_load.py``'s durable load, or the whole state at the shared file system's assumed
  aggregate rate, whichever is slower;
* restart, cold start, queue wait: assumed (a restart on the sandbox measures about 10 s,
  bench_recovery.py; processes, imports and NCCL's init on 2,048 nodes are not measured);
* the hang timeout: the derived floor for the built-in trainer (slurmtrain/job/hangs.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from slurmtrain.job.hangs import HANG_FLOOR_S  # noqa: E402  (the derived hang timeout's floor)

MIB = 2 ** 20
BYTES_PER_PARAM = 12          # fp32 weights + AdamW exp_avg + exp_avg_sq
FS_AGGREGATE_BPS = 1e12       # assumed: a large site's parallel file system, 1 TB/s read
RESTART_S = 60.0              # assumed at scale (the table); ~10 s on the sandbox


def fail(message: str):
    print(f"goodput_costs.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read(path: str, keys: tuple[str, ...]) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    missing = [k for k in keys if k not in data]
    if missing:
        fail(f"{path}: no {', '.join(missing)} (written by the benchmark's --json?)")
    return data


def rates(save_path: str, load_path: str) -> dict[str, float]:
    """Bytes a second, from the benchmarks' own figures."""
    save = read(save_path, ("models",))
    model = next(iter(save["models"].values()))
    size = model["checkpoint_mb"] * MIB
    load = read(load_path, ("checkpoint_mb", "durable", "memory, own", "memory, peer", "copy, the call"))
    rank_bytes = load["checkpoint_mb"] * MIB / 2  # bench_load: 2 ranks, each loads its half
    return {"d2h": size / model["async"]["stall"], "take": rank_bytes / load["copy, the call"],
            "own": rank_bytes / load["memory, own"],
            "peer": rank_bytes / load["memory, peer"], "durable": rank_bytes / load["durable"],
            "save_device": save.get("device", "?"), "load_torch": load.get("torch", "?")}


def costs(params: float, gpus: int, r: dict[str, float]) -> tuple[dict, list[str]]:
    gpu_bytes = params * BYTES_PER_PARAM / gpus
    stall = gpu_bytes / r["d2h"]
    memory_stall = stall  # the device-to-host copy, as the background save's; the rest in its thread
    durable_load = max(gpu_bytes / r["durable"], params * BYTES_PER_PARAM / FS_AGGREGATE_BPS)
    sig = lambda x: float(f"{x:.4g}")  # noqa: E731  (a stall of milliseconds keeps its digits)
    out = {"checkpoint_s": sig(stall), "memory_stall_s": sig(memory_stall),
           "memory_load_s": sig(gpu_bytes / r["peer"]), "load_s": sig(durable_load),
           "restart_s": RESTART_S, "hang_timeout_s": HANG_FLOOR_S}
    gib = gpu_bytes / 2 ** 30
    lines = [f"state: {params:.3g} parameters x {BYTES_PER_PARAM} bytes over {gpus:,} GPUs = {gib:.2f} GiB a GPU",
             f"measured: device-to-host copy {r['d2h'] / 2**30:.2f} GiB/s (bench_save --gpu, {r['save_device']})",
             f"measured: node memory, own copy {r['own'] / 2**30:.2f} GiB/s a rank; peer's {r['peer'] / 2**30:.2f} "
             f"GiB/s; durable {r['durable'] / 2**30:.2f} GiB/s; a copy's call (host to host) {r['take'] / 2**30:.2f} "
             f"GiB/s (bench_load, torch {r['load_torch']})",
             "assumed: a copy's serialization, write to node memory and send to the peer cost the steps nothing "
             "(its thread): it stalls for the device-to-host copy alone",
             f"assumed: shared file system {FS_AGGREGATE_BPS / 1e12:g} TB/s in all; restart {RESTART_S:g} s at scale",
             f"from the code: hang timeout floor {HANG_FLOOR_S:g} s (the built-in trainer's derived timeout)"]
    lines += [f"=> {k} = {v:g}" for k, v in out.items()]
    return out, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=405e9, help="the model's parameters (default: Llama 3 405B)")
    ap.add_argument("--gpus", type=int, default=16384, help="the job's GPUs, for the bytes a GPU holds")
    ap.add_argument("--save", default=str(HERE / "measured" / "bench_save_gpu_h200.json"),
                    help="bench_save.py --gpu --json output")
    ap.add_argument("--load", default=str(HERE / "measured" / "bench_load_cpu.json"), help="bench_load.py --json output")
    ap.add_argument("--out", help="write the costs here (for sim_goodput.py --costs-json)")
    a = ap.parse_args(argv)
    if a.params <= 0 or a.gpus <= 0:
        fail("--params and --gpus must be positive")
    out, lines = costs(a.params, a.gpus, rates(a.save, a.load))
    print("\n".join(lines))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
