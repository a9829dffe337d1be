#!/usr/bin/env bash
# The test command: installs everything the suite needs on a fresh Debian machine
# (as root), brings the sandbox Slurm cluster up and runs the whole suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  for pkg in slurm-wlm slurmd slurmctld slurmdbd munge mariadb-server shellcheck procps debootstrap; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ "${#need[@]}" -gt 0 ]; then
    step "apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
else
  echo "not root or no apt-get: Debian packages are not installed; Slurm tests will skip with a reason" >&2
fi

PY=${PYTHON:-python3}
step "pip install torch==2.13.0 (CPU build), deepspeed, slurmtrain[train,test,datasets]"
# torch pinned first: an unpinned torch (or deepspeed's isolated build) would pull CUDA builds.
"$PY" -m pip install -q --disable-pip-version-check torch==2.13.0
"$PY" -c "import deepspeed" 2>/dev/null || DS_BUILD_OPS=0 "$PY" -m pip install -q --no-build-isolation deepspeed
"$PY" -m pip install -q --disable-pip-version-check -e '.[train,test,datasets]'

# The oldest Python setup.cfg allows (3.10) imports and runs the CLI in a test
# (tests/test_python310.py): give it the CLI's dependencies where this machine has one.
PY310=""
for c in /root/.pyenv/versions/3.10.*/bin/python "$(command -v python3.10 || true)"; do
  if [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then PY310=$c; break; fi
done
if [ -n "$PY310" ]; then
  step "$PY310 -m pip install click jinja2 tomli (the Python 3.10 test)"
  "$PY310" -m pip install -q --disable-pip-version-check click jinja2 tomli
fi

if [ "$(id -u)" = 0 ]; then
  step "slurmtrain sandbox up"
  # A sandbox left running with other settings (accounting on, by an interrupted run) is
  # refused by `up`: start it again with the defaults.
  slurmtrain sandbox up || { slurmtrain sandbox down && slurmtrain sandbox up; }
fi

# The Slurm-version lane (scripts/slurm_lane.sh: Slurm 24.11 in a Debian 13 tree, the
# torch-free end-to-end tests) and the container lane (scripts/container_lane.sh: apptainer
# in a copy of that tree, jobs in a SIF image submitted by an ordinary user, then a laptop
# user over ssh) run beside the suite, each on its own sandbox: their jobs mostly wait, so
# they cost the suite little time. The trees are built first (once per machine: the
# container lane's is a copy of the other's), then both lanes run at once (about 10 minutes
# beside the suite on a fast machine).
# For the whole suite only (no pytest arguments), as root; SLURMTRAIN_LANE=0 leaves the
# lanes out, =1 runs them with arguments too; SLURMTRAIN_CONTAINER_LANE=0 leaves the
# container lane out.
LANE_PID=""
LANE_LOG=$(mktemp /tmp/slurmtrain-lane.XXXXXX)
lanes() {
  local st=0 cpid="" clog
  SECONDS=0
  clog=$(mktemp /tmp/slurmtrain-container-lane.XXXXXX)
  if [ "${SLURMTRAIN_CONTAINER_LANE:-}" != 0 ]; then
    SLURMTRAIN_CONTAINER_PREPARE_ONLY=1 bash scripts/container_lane.sh \
      || { echo "lanes: building the lanes' Debian 13 trees failed (exit $?): no lane ran"; return 1; }
    bash scripts/container_lane.sh >"$clog" 2>&1 &
    cpid=$!
  fi
  bash scripts/slurm_lane.sh || st=1
  if [ -n "$cpid" ]; then
    wait "$cpid" || st=1
    printf '\n==> container lane (ended %s s into the lanes)\n' "$SECONDS"
    cat "$clog"
  fi
  return "$st"
}
if [ "$(id -u)" = 0 ] && { [ "${SLURMTRAIN_LANE:-}" = 1 ] || { [ $# = 0 ] && [ "${SLURMTRAIN_LANE:-}" != 0 ]; }; }; then
  step "Slurm-version lane and container lane, in the background (log: $LANE_LOG)"
  lanes >"$LANE_LOG" 2>&1 &
  LANE_PID=$!
fi

step "pytest"
# One thread per torch process (the trainer's subprocesses already get it from torchrun or
# tests/train/trainer_util.py): the suite keeps about ten processes busy on 2 cores, and
# torch's default of a thread per core in the workers' own tests only adds contention.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Five workers (tests/conftest.py): two Slurm lanes, each with its own sandbox (the
# second is brought up on its first use), a third and a fourth for the files that bring up
# sandboxes of their own (networked nodes; three nodes: they mostly wait on faults), and the
# computing tests, one file at a time, in the fifth worker and in whichever lane has finished; groups go out in the conftest's
# order (--no-loadscope-reorder). The 25 slowest steps (PYTEST_DURATIONS: how many; 0,
# all) are listed at the end, and the CPU time the whole machine spent meanwhile: where the
# suite's time goes, run by run (2 cores: a suite that keeps both busy spends 2 CPU-s a second).
cpu_seconds() { awk '/^cpu /{print int(($2+$3+$4+$7+$8) / 100)}' /proc/stat; }
status=0
SECONDS=0
CPU0=$(cpu_seconds)
PROFILER=""  # SLURMTRAIN_CPU_BY_TEST=OUT.json: CPU-s by test (scripts/cpu_by_test.py)
if [ -n "${SLURMTRAIN_CPU_BY_TEST:-}" ]; then
  "$PY" scripts/cpu_by_test.py "$SLURMTRAIN_CPU_BY_TEST" & PROFILER=$!
fi
"$PY" -m pytest -q -rs -n "${PYTEST_WORKERS:-5}" --dist loadgroup --no-loadscope-reorder \
  --durations="${PYTEST_DURATIONS:-25}" "$@" || status=$?
echo "pytest: ${SECONDS} s, $(( $(cpu_seconds) - CPU0 )) CPU-s on this machine meanwhile"
[ -z "$PROFILER" ] || { kill "$PROFILER"; wait "$PROFILER" || true; echo "CPU-s by test: $SLURMTRAIN_CPU_BY_TEST"; }
if [ -n "$LANE_PID" ]; then
  lane=0
  wait "$LANE_PID" || lane=$?
  step "background lanes (exit status $lane; waited ${SECONDS} s in all)"
  cat "$LANE_LOG"
  [ "$lane" = 0 ] || status=1
fi
exit "$status"
