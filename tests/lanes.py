"""Which Slurm lane (and so which sandbox) runs each Slurm test file: tests/conftest.py
groups the tests by it for pytest-xdist, tests/test_lanes.py checks the list."""

from __future__ import annotations

import os

# The Slurm tests run in two lanes when pytest-xdist has a worker for each and one more
# for the computing tests (`-n 3`): each lane its own sandbox, in its own state directory
# (the first lane the default one, which `slurmtrain sandbox up` brings up). The files of
# the second lane, chosen so the two take about as long (their times in DEVELOPERS.md):
SECOND_LANE = frozenset({
    "tests/survival/test_survival_limits.py",
    "tests/survival/test_deepspeed_survival.py",
    "tests/survival/test_pipeline_survival.py",
    "tests/tracking/test_tracking_e2e.py",
    "tests/e2e/test_e2e_trainer.py",
    "tests/survival/test_stragglers_e2e.py",
    "tests/e2e/test_sweeps.py",
    "tests/sandbox/test_sandbox_cluster.py",
    "tests/survival/test_survival.py",  # under -n 4; under -n 3 the third lane's files make this one the longer
})
# With a worker more (`-n 4`, scripts/test.sh), a third lane: the files that bring up sandboxes
# of their own (networked nodes, three nodes) and wait on faults more than they compute (a
# hang's timeout, Slurm's SlurmdTimeout) run beside the two lanes instead of in the second.
THIRD_LANE = frozenset({
    "tests/survival/test_four_faults_e2e.py",
    "tests/survival/test_network_faults_e2e.py",
    "tests/sandbox/test_networked_nodes.py",
})
# With a fifth worker (`-n 5`, scripts/test.sh), the three-node file gets a lane of its own
# (its sandbox is not the networked one): the third lane alone had become the longest, ending
# minutes after the rest while it waited on faults.
FOURTH_LANE = frozenset({
    "tests/survival/test_four_faults_e2e.py",
})
SECOND_LANE_DIR = "/var/lib/slurmtrain-sandbox-lane2"
FIRST_LANE_DIR = os.environ.get("SLURMTRAIN_SANDBOX_DIR")  # None: the default


def lane(config, path) -> str:
    """"slurm", "slurm2", "slurm3" or "slurm4": the lane of the tests in file ``path`` (and so
    the sandbox of those that use the lane's: the third and fourth lanes' bring up their own)."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    rel = os.path.relpath(str(path), str(config.rootpath)).replace(os.sep, "/")
    if workers >= 5 and rel in FOURTH_LANE:
        return "slurm4"
    if workers >= 4 and rel in THIRD_LANE:
        return "slurm3"
    return "slurm2" if workers >= 3 and rel in SECOND_LANE | THIRD_LANE else "slurm"
