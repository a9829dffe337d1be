#!/usr/bin/env bash
# The three GPU benchmark runs of BENCHMARKS.md ("Trainer on one GPU") in one go, each under
# its own time limit so that one that hangs or runs out of memory does not cost the others.
# Usage: bash scripts/bench_gpu_all.sh OUTDIR
set -u
out=${1:?usage: bench_gpu_all.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/device.txt"
python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())' | tee -a "$out/device.txt"
bench() {  # LIMIT_S NAME ARGS...
    local limit=$1 name=$2; shift 2
    echo "=== $name: $*"
    local t0=$SECONDS
    timeout -k 10 "$limit" python3 scripts/bench_gpu.py "$@" --out "$out/$name.json"
    echo "=== $name: exit $? after $((SECONDS - t0)) s"
    [ -f "$out/$name.trace.json" ] && gzip -f "$out/$name.trace.json"
}
bench 200 bench_tinyllama_mb4 --preset tinyllama-1.1b --seq 2048 --micro-batch 4 --steps 30 --warmup 10 --compile --profile
bench 200 bench_llama3_8b_l8 --preset llama3-8b --layers 8 --seq 2048 --micro-batch 2 --steps 20 --warmup 10 --compile --profile
bench 130 bench_tinyllama_mb8 --preset tinyllama-1.1b --seq 2048 --micro-batch 8 --steps 30 --warmup 10 --compile
