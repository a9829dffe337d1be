"""The split of the Slurm tests into two lanes (tests/conftest.py) names real Slurm test
files: a renamed file would silently move back to the first lane and lengthen the suite."""

from __future__ import annotations

from pathlib import Path

import lanes

REPO = Path(__file__).resolve().parents[1]


def test_every_second_lane_file_exists_and_holds_slurm_tests():
    for rel in sorted(lanes.SECOND_LANE):
        path = REPO / rel
        assert path.is_file(), f"{rel} is in SECOND_LANE but does not exist"
        assert "pytest.mark.slurm" in path.read_text(), f"{rel} is in SECOND_LANE but has no Slurm tests"


def test_the_second_lane_has_its_own_state_directory():
    from slurmtrain.sandbox.layout import DEFAULT_STATE_DIR, Layout

    first, second = Layout(Path(DEFAULT_STATE_DIR)), Layout(Path(lanes.SECOND_LANE_DIR))
    assert second.port_base != first.port_base
    # the local profile's rendezvous port is 29500 + job id % 2000: a suite submits ~100 jobs
    assert abs(second.first_job_id % 2000 - first.first_job_id % 2000) >= 500
