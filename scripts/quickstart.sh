#!/usr/bin/env bash
# From a fresh Debian/Ubuntu machine (as root) to a finished 2-node training job:
#   1. install slurmtrain with its extras (pinned torch first)
#   2. start the one-machine Slurm sandbox (installs Slurm with apt where it is missing)
#   3. build the demo corpus, submit a 2-node job, follow it to the end
#
#   bash scripts/quickstart.sh            # from the repository root
#   SKIP_INSTALL=1 bash scripts/quickstart.sh   # already installed: only steps 2-3
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
RUNS_DIR=${RUNS_DIR:-runs}

step() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "quickstart: run as root: the sandbox starts Slurm daemons and edits /etc/hosts" >&2
  exit 1
fi

if [ -z "${SKIP_INSTALL:-}" ]; then
  step "installing slurmtrain and its extras"
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-pip python3-venv
  fi
  # torch first, pinned, so that the extras below do not pull another version.
  "$PYTHON" -m pip install --quiet torch==2.13.0
  "$PYTHON" -m pip install --quiet -e '.[train,test]'
  # DeepSpeed builds its ops at install time unless told not to, and an isolated build
  # environment would fetch a CUDA torch: neither is wanted on a CPU machine.
  DS_BUILD_OPS=0 "$PYTHON" -m pip install --quiet --no-build-isolation deepspeed
fi

step "starting the Slurm sandbox (2 nodes)"
if slurmtrain sandbox status >/dev/null 2>&1; then
  echo "a sandbox already runs; using it"
else
  slurmtrain sandbox up --nodes 2
fi
eval "$(slurmtrain sandbox env)"   # SLURM_CONF for sbatch, squeue, slurmtrain status...
sinfo

step "building the demo corpus (text already on this machine; nothing is downloaded)"
slurmtrain demo-corpus

step "submitting a 2-node job: the built-in trainer, recipe tiny-demo, 2 processes per node"
submit_out=$(slurmtrain submit --runs-dir "$RUNS_DIR" --profile local --recipe tiny-demo)
echo "$submit_out"
run=$(basename "$(sed -n 's/^run directory: //p' <<<"$submit_out")")

step "following $run to the end (Ctrl-C stops following, not the job)"
slurmtrain watch "$RUNS_DIR/$run" || true

step "final status"
slurmtrain status --runs-dir "$RUNS_DIR" "$run"
state=$(slurmtrain status --runs-dir "$RUNS_DIR" --json "$run" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["state"])')
if [ "$state" != COMPLETED ]; then
  echo "quickstart: the job ended $state; see: slurmtrain logs --runs-dir $RUNS_DIR $run" >&2
  exit 1
fi
cat <<EOF

Done. Next:
  slurmtrain runs --runs-dir $RUNS_DIR          # every run and its state
  slurmtrain watch $RUNS_DIR/$run               # training progress (built-in trainer)
  slurmtrain gen --profile aws-p4d --nodes 4 -- python train.py --lr 3e-4   # your program on a real cluster
  slurmtrain sandbox down                       # stop the sandbox
EOF
