"""The doctor's program on every node: ``python -m slurmtrain.doctor.node --checks ...``.

Started by the doctor job like a training program (same container, environment, setup
lines and launcher), one process per node. Each check returns a result (a value, the
figure shown, ``ok`` for what this node can judge alone, a detail); the cross-node
verdicts (versions equal, matmul vs the median, clock skew) are the report's. The
results go to ``<run>/doctor/<node>.json``; a node that never writes one failed its
setup. torch is imported here, inside the checks, never by the CLI.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path


def _timed(fn, limit: float):
    """``fn()`` with a time limit: a local check that hangs (a stuck mount, a wedged GPU)
    becomes a failed result instead of a doctor job that never ends."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - any failure is the check's result
            box["error"] = f"{type(err).__name__}: {err}"
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        return {"ok": False, "figure": "timeout", "detail": f"no answer within {limit:g} s"}
    if "error" in box:
        return {"ok": False, "figure": "error", "detail": box["error"]}
    return box["value"]


def check_versions(deepspeed: bool) -> dict:
    data = {"python": platform.python_version(), "executable": sys.executable}
    import torch
    data["torch"] = torch.__version__
    if deepspeed:
        try:
            import deepspeed as ds
            data["deepspeed"] = ds.__version__
        except ImportError as err:
            return {"ok": False, "figure": "no deepspeed", "detail": str(err), "data": data}
    figure = " ".join(f"{k} {v}" for k, v in data.items() if k != "executable")
    return {"ok": True, "figure": figure, "data": data}


def check_gpus() -> dict:
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"ok": True, "value": n, "figure": str(n)}


def check_matmul(seconds: float) -> dict:
    """FLOP/s of square matmuls for about ``seconds``: bf16 on a GPU, fp32 on CPU."""
    import torch
    if torch.cuda.is_available():
        dev, dtype, n = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))), torch.bfloat16, 8192
        sync = torch.cuda.synchronize
    else:
        dev, dtype, n, sync = torch.device("cpu"), torch.float32, 512, (lambda: None)
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    a @ b
    sync()
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        iters += 1
        if dev.type == "cuda" and iters % 10:
            continue
        sync()
    sync()
    elapsed = time.perf_counter() - start
    gflops = 2 * n ** 3 * iters / elapsed / 1e9
    return {"ok": True, "value": gflops, "figure": f"{gflops:.1f} GFLOP/s ({dtype}, n={n})".replace("torch.", "")}


def check_port(port: int) -> dict:
    """On the head node before any group exists: bind the rendezvous port. Under torchrun
    the agent's store already holds it: then it is ours, and every node joined through it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", port))
        return {"ok": True, "figure": f"{port} free"}
    except OSError as err:
        if err.errno == errno.EADDRINUSE and os.environ.get("TORCHELASTIC_RUN_ID"):
            return {"ok": True, "figure": f"{port} held by this job's rendezvous"}
        return {"ok": False, "figure": f"{port} in use", "detail": f"cannot bind port {port}: {err}"}
    finally:
        s.close()


def _group(timeout_s: float):
    import torch
    import torch.distributed as dist
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return dist


def _barrier(dist) -> None:
    import torch
    dist.all_reduce(torch.zeros(1))  # on the gloo side: works with and without GPUs


def check_rundir(dist, run_dir: Path, node: str) -> dict:
    """Write a file under the run directory; after a barrier read every other node's."""
    probes = run_dir / "doctor"
    token = f"{node} {os.environ.get('SLURM_JOB_ID', '')}\n"
    wrote, error = True, ""
    try:
        probes.mkdir(parents=True, exist_ok=True)
        (probes / f"probe-{node}").write_text(token)
    except OSError as err:
        wrote, error = False, f"cannot write {probes}: {err}"
    names: list = [None] * dist.get_world_size()
    dist.all_gather_object(names, node)
    missing = []
    for other in names:
        try:
            if (probes / f"probe-{other}").read_text().split()[0] != other:
                missing.append(other)
        except (OSError, IndexError):
            missing.append(other)
    detail = error or (f"cannot read the file(s) of {', '.join(missing)} at {probes}" if missing else "")
    return {"ok": wrote, "figure": str(run_dir), "detail": detail, "data": {"wrote": wrote, "missing": missing}}


def check_clock(dist) -> dict:
    """This node's offset from the median clock, read right after a barrier (so the
    figure includes the barrier's own spread, milliseconds on a working network)."""
    import torch
    _barrier(dist)
    t = torch.tensor([time.time()], dtype=torch.float64)
    all_t = [torch.zeros(1, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(all_t, t)
    offset = float(t) - statistics.median(float(x) for x in all_t)
    return {"ok": True, "value": offset, "figure": f"{offset * 1000:+.1f} ms"}


def _bus_bw(dist, x, seconds: float, group=None, root: int = 0) -> tuple[float, int]:
    """(busbw GB/s, iterations) of all-reduces of ``x`` over ``group`` for about ``seconds``."""
    import torch
    n = dist.get_world_size(group)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    for _ in range(2):
        dist.all_reduce(x, group=group)
    sync()
    iters, start = 0, time.perf_counter()
    # Every rank must run the same number of collectives: the root decides when to stop.
    while True:
        dist.all_reduce(x, group=group)
        iters += 1
        done = torch.tensor([float(time.perf_counter() - start >= seconds or iters >= 200)])
        dist.broadcast(done, root, group=group)
        if done.item():
            break
    sync()
    algbw = x.numel() * x.element_size() / ((time.perf_counter() - start) / iters) / 1e9
    return algbw * 2 * (n - 1) / n, iters


def _ring_pairs(dist, x, seconds: float, names: list[str]) -> dict[str, float]:
    """busbw between this node and each ring neighbour, one pair at a time (every rank
    creates every group, as torch requires): a slow link or NIC shows in both pairs of
    its node. Fewer than 3 nodes: nothing to compare."""
    world, rank, out = dist.get_world_size(), dist.get_rank(), {}
    if world < 3:
        return out
    for i in range(world):
        j = (i + 1) % world
        group = dist.new_group([i, j])
        if rank in (i, j):
            out[names[j if rank == i else i]] = _bus_bw(dist, x, seconds, group, root=i)[0]
        _barrier(dist)
    return out


PROBE_BYTES = 64 * 2 ** 10  # the smallest message: its all-reduce sizes the real one


def message_bytes(probe_s: float, seconds: float, size_mb: float) -> int:
    """The all-reduce's message: ``size_mb``, or less where one all-reduce of it would take
    more than half of ``seconds`` at the probe's pace (a power of two, at least the probe).
    A 4 MiB message over a 1 Mbit/s link takes half a minute a collective: the warm-up
    alone would outlast the group's timeout and the verdict would blame a node that only
    waited. (The probe's time includes the per-message latency, so scaling it up
    overestimates: a loaded loopback keeps the full size.)"""
    full = int(size_mb * 2 ** 20) // 4 * 4
    fits = PROBE_BYTES * seconds / 2 / probe_s if probe_s > 0 else full
    if fits >= full:
        return full
    size = PROBE_BYTES
    while size * 2 <= fits:
        size *= 2
    return min(size, full)


def _probe(dist, dev) -> float:
    """Seconds one all-reduce of :data:`PROBE_BYTES` takes, the slowest rank's (the same
    figure on every rank, so every rank picks the same message size)."""
    import torch
    x = torch.ones(PROBE_BYTES // 4, dtype=torch.float32, device=dev)
    dist.all_reduce(x)
    times = []
    for _ in range(3):  # the fastest of three: a busy machine's hiccup is not the link
        start = time.perf_counter()
        dist.all_reduce(x)
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    took = torch.tensor([min(times)], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return float(took)


def check_allreduce(dist, seconds: float, size_mb: float) -> dict:
    """Bus bandwidth as nccl-tests reports it: algbw = bytes / time, busbw = algbw * 2(n-1)/n;
    over all nodes, then each node with its ring neighbours."""
    import torch
    n = dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else torch.device("cpu")
    nbytes = message_bytes(_probe(dist, dev), seconds, size_mb)
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    busbw, iters = _bus_bw(dist, x, seconds)
    names: list = [None] * n
    dist.all_gather_object(names, os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    pairs = _ring_pairs(dist, x, seconds / 2, names)
    size = f"{nbytes / 2 ** 20:g} MiB" if nbytes >= 2 ** 20 else f"{nbytes / 2 ** 10:g} KiB"
    slow = f"; {size_mb:g} MiB too slow here" if nbytes < message_bytes(0, seconds, size_mb) else ""
    return {"ok": True, "value": busbw, "figure": f"{busbw:.3g} GB/s busbw ({size} x {iters}, {n} nodes{slow})",
            "data": {"busbw_gbps": busbw, "algbw_gbps": busbw * n / (2 * (n - 1)) if n > 1 else 0.0,
                     "bytes": nbytes, "iterations": iters, "pairs_busbw_gbps": pairs,
                     "backend": "nccl" if dev.type == "cuda" else "gloo", "world": n}}


def run(args) -> dict:
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))
    checks, limit = set(args.checks.split(",")), args.check_timeout
    results: dict = {}
    if "versions" in checks:
        results["versions"] = _timed(lambda: check_versions(args.deepspeed), limit)
    if "gpus" in checks:
        results["gpus"] = _timed(check_gpus, limit)
    # The head node (the script's MASTER_ADDR; a launcher may give rank 0 to another node)
    # checks the script's port, computed as the job script does (torchrun's workers see their own).
    if "port" in checks and node == os.environ.get("SLURMTRAIN_HEAD_NODE"):
        port = args.rdzv_port + (int(os.environ.get("SLURM_JOB_ID", 0)) % args.rdzv_port_spread
                                 if args.rdzv_port_spread else 0)
        results["port"] = _timed(lambda: check_port(port), limit)
    collective = checks & {"rundir", "clock", "allreduce", "matmul"}
    dist = None
    if collective:
        try:
            dist = _group(limit)
        except Exception as err:  # noqa: BLE001 - reported, not raised
            for name in collective:
                results[name] = {"ok": False, "figure": "no group", "detail": f"process group: {err}"}
    if dist is not None:
        run_dir = Path(os.environ["SLURMTRAIN_RUN_DIR"])
        for name, fn in (("rundir", lambda: check_rundir(dist, run_dir, node)), ("clock", lambda: check_clock(dist)),
                         ("matmul", lambda: check_matmul(args.seconds)),
                         ("allreduce", lambda: check_allreduce(dist, args.seconds, args.size_mb))):
            if name in checks:
                try:
                    results[name] = fn()
                    if name == "matmul":
                        _barrier(dist)  # the all-reduce starts together
                except Exception as err:  # noqa: BLE001 - a collective's timeout lands here
                    results[name] = {"ok": False, "figure": "error", "detail": f"{type(err).__name__}: {err}"}
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the results are what matters; they are written next
            pass
    return {"node": node, "rank": rank, "time": time.time(), "results": results}


def gate(gate_dir: Path, expect_gpus: int, deepspeed: bool) -> int:
    """The in-job gate's part on one node (resilience.preflight): local checks only, in
    seconds. Writes ``<node>.ok`` holding the versions line (the script compares nodes'
    lines) or ``<node>.fail`` holding why; a node that writes neither failed too."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    problems, line = [], ""
    v = _timed(lambda: check_versions(deepspeed), 60)
    if v.get("ok") is False:
        problems.append(f"versions: {v.get('detail')}")
    line = v.get("figure", "")
    if not problems:
        g = _timed(check_gpus, 30)
        if g.get("ok") is False or g.get("value") != expect_gpus:
            problems.append(f"gpus: {g.get('value', g.get('detail'))}, expected {expect_gpus}")
    name = f"{node}.fail" if problems else f"{node}.ok"
    (gate_dir / name).write_text(("; ".join(problems) if problems else line) + "\n")
    print(f"slurmtrain preflight: {node}: {'; '.join(problems) or 'ok (' + line + ')'}", flush=True)
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurmtrain.doctor.node")
    ap.add_argument("--checks", default="versions")
    ap.add_argument("--gate", metavar="DIR", help="run the in-job gate's fast checks, write DIR/<node>.ok|.fail")
    ap.add_argument("--expect-gpus", type=int, default=0)
    ap.add_argument("--check-timeout", type=float, default=60.0)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    ap.add_argument("--size-mb", type=float, default=4.0, help="all-reduce message size (MiB)")
    ap.add_argument("--deepspeed", action="store_true")
    ap.add_argument("--rdzv-port", type=int, default=29500)
    ap.add_argument("--rdzv-port-spread", type=int, default=0)
    args = ap.parse_args(argv)
    if args.gate:
        return gate(Path(args.gate), args.expect_gpus, args.deepspeed)
    out = run(args)
    run_dir = Path(os.environ["SLURMTRAIN_RUN_DIR"]) / "doctor"
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{out['node']}.json.tmp"
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(run_dir / f"{out['node']}.json")
    print(f"slurmtrain doctor: {out['node']}: " + ", ".join(
        f"{k} {'ok' if v.get('ok') else 'FAILED'} ({v.get('figure')})" for k, v in out["results"].items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
