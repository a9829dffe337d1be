"""Stand-ins for Slurm's commands, shared by the tests that run a rendered job script
outside Slurm (tests/doctor, tests/runs)."""

FAKE_SRUN_STOP = """#!/bin/bash
# The launch step: every node arrives; the warning signal comes; the program saves and exits 75.
for n in $FAKE_NODES; do touch "$SLURMTRAIN_ARRIVED/$n"; done
trap 'exit 75' USR2
kill -USR2 $PPID
for _ in $(seq 50); do sleep 0.1; done
exit 1
"""
