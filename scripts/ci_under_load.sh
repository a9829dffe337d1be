#!/usr/bin/env bash
# CI on a busy machine: `.ci/run` on a clean clone of HEAD, ROUNDS times in a row (default
# 2), while a 2-process torchrun of the built-in trainer trains in a loop beside it, as
# issue #9 asks the suite to survive. Prints each round's exit status and wall time and
# writes them to $OUT/summary (default /tmp/ci-under-load).
#   bash scripts/ci_under_load.sh [ROUNDS]
# Run as root on a machine where scripts/test.sh has run once (torch installed). The
# installed slurmtrain is pointed back at this checkout at the end.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-2}
OUT=${OUT:-/tmp/ci-under-load}
rm -rf "$OUT" && mkdir -p "$OUT/load"

# The load: the trainer on the demo corpus, 2 processes, started again whenever it ends.
(cd "$OUT/load" && python3 -m slurmtrain demo-corpus --max-mb 0.5 >/dev/null)
(
  cd "$OUT/load"
  while [ ! -e "$OUT/STOP" ]; do
    rm -rf run
    python3 -m torch.distributed.run --standalone --nproc-per-node=2 -m slurmtrain.train \
      --recipe tiny-demo --run-dir run --train-steps 400 --save-steps 0 >>"$OUT/load.log" 2>&1
  done
) &
LOAD=$!

for round in $(seq 1 "$ROUNDS"); do
  rm -rf "$OUT/clone" && git clone -q "$REPO" "$OUT/clone"
  start=$(date +%s)
  (cd "$OUT/clone" && CI=true bash .ci/run >"$OUT/ci$round.log" 2>&1)
  rc=$?
  line="round $round: exit $rc in $(( $(date +%s) - start )) s ($(tail -n 1 "$OUT/ci$round.log"))"
  echo "$line" | tee -a "$OUT/summary"
  [ "$rc" = 0 ] || break
done

touch "$OUT/STOP"
wait "$LOAD"
python3 -m pip install -q --no-deps -e "$REPO" >/dev/null 2>&1
