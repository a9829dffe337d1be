"""The split of the Slurm tests into two lanes (tests/conftest.py) names real Slurm test
files: a renamed file would silently move back to the first lane and lengthen the suite."""

from __future__ import annotations

from pathlib import Path

import lanes

REPO = Path(__file__).resolve().parents[1]


def test_every_second_and_third_lane_file_exists_and_holds_slurm_tests():
    assert not lanes.SECOND_LANE & lanes.THIRD_LANE
    for rel in sorted(lanes.SECOND_LANE | lanes.THIRD_LANE):
        path = REPO / rel
        assert path.is_file(), f"{rel} is in SECOND_LANE but does not exist"
        assert "pytest.mark.slurm" in path.read_text(), f"{rel} is in SECOND_LANE but has no Slurm tests"


def test_the_second_lane_has_its_own_state_directory():
    from slurmtrain.sandbox.layout import DEFAULT_STATE_DIR, Layout

    first, second = Layout(Path(DEFAULT_STATE_DIR)), Layout(Path(lanes.SECOND_LANE_DIR))
    assert second.port_base != first.port_base
    # the local profile's rendezvous port is 29500 + job id % 2000: a suite submits ~100 jobs
    assert abs(second.first_job_id % 2000 - first.first_job_id % 2000) >= 500


def test_every_sandbox_the_suite_and_its_lanes_bring_up_has_ports_of_its_own():
    """The sandboxes run side by side (the lanes, the three-node sandbox, the Slurm-version
    and container lanes): each state directory named in tests/ or scripts/ gets its own
    block of ports (sandbox.layout derives it from the path), else a daemon finds its port
    taken. Found when the container lane's first name shared the three-node sandbox's."""
    import re

    from slurmtrain.sandbox.layout import Layout

    named = set()
    for path in [*(REPO / "tests").rglob("*.py"), *(REPO / "scripts").glob("*.sh")]:
        named |= set(re.findall(r"/var/lib/slurmtrain-sandbox[\w-]*", path.read_text()))
    assert len(named) >= 5, named  # the default, lane2, three nodes, Slurm 24.11, containers
    blocks = {d: Layout(Path(d)).port_base for d in named}
    assert len(set(blocks.values())) == len(blocks), blocks


def test_the_files_on_a_sandbox_of_their_own_share_a_lane():
    """A sandbox of one state directory (the networked one, the three-node one) is brought up
    and taken down by each file that uses it: two files on it in two lanes could run at once,
    and one's teardown would take the other's nodes away."""
    import re

    users: dict[str, set[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        rel, text = path.relative_to(REPO).as_posix(), path.read_text()
        if "pytest.mark.slurm" not in text or path == Path(__file__).resolve():
            continue
        for fixture in set(re.findall(r"\b(sandbox_networked|sandbox_three_nodes)\b", text)):
            users.setdefault(fixture, set()).add("slurm4" if rel in lanes.FOURTH_LANE else
                                                 "slurm3" if rel in lanes.THIRD_LANE else
                                                 "slurm2" if rel in lanes.SECOND_LANE else "slurm")
    assert set(users) == {"sandbox_networked", "sandbox_three_nodes"}, users
    assert all(len(where) == 1 for where in users.values()), users


def test_every_test_of_the_third_lane_brings_up_a_sandbox_of_its_own():
    """The third lane has no sandbox of its own: a test there that used the lane's (``sandbox``,
    as every Slurm test does unless it asks for another) would bring up the first lane's."""
    import ast

    assert lanes.FOURTH_LANE <= lanes.THIRD_LANE  # under -n 4 they are the third lane's
    for rel in sorted(lanes.THIRD_LANE):
        tree = ast.parse((REPO / rel).read_text())
        tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        assert tests, rel
        for fn in tests:
            args = {a.arg for a in fn.args.args}
            assert args & {"sandbox_networked", "sandbox_three_nodes"}, f"{rel}::{fn.name} uses the lane's sandbox"
