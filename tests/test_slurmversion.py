"""The Slurm version: read from the daemons (sandbox) and the controller (manifest,
doctor), never from `sinfo -V`; the tested range and its warning; what the sandbox writes
for each version."""

from __future__ import annotations

import pytest

from slurmtrain import slurmversion as sv
from slurmtrain.doctor import run as doctor_run
from slurmtrain.doctor.report import PASS, WARN
from slurmtrain.sandbox import config, hosts

CONFIG_24 = """Configuration data as of 2026-11-25T01:43:02
AccountingStorageType   = (null)
SLURM_CONF              = /var/lib/slurmtrain-sandbox-slurm24/slurm.conf
SLURM_VERSION           = 24.11.5
SLURMCTLD_ADDR          = (null)
"""


@pytest.mark.parametrize("text, want", [
    ("slurm-wlm 24.11.5\n", (24, 11, 5)),       # Debian 13's slurmctld -V
    ("slurm 22.05.8\n", (22, 5, 8)),            # Debian 12's
    ("SLURM_VERSION = 23.02.7", (23, 2, 7)),
    ("slurm 25.05", (25, 5, 0)),
    ("", None), ("slurmctld: command not found", None), (None, None),
])
def test_parse(text, want):
    assert sv.parse(text) == want


def test_text_writes_it_as_slurm_does():
    assert (sv.text((22, 5, 8)), sv.text((24, 11, 5)), sv.text(None)) == ("22.05.8", "24.11.5", "unknown")


def test_the_tested_range_is_22_05_to_24_11_by_release_series():
    assert all(sv.tested(v) for v in [(22, 5, 0), (22, 5, 11), (23, 2, 7), (24, 5, 1), (24, 11, 9)])
    assert not any(sv.tested(v) for v in [(21, 8, 8), (25, 5, 0)])
    assert sv.warning((24, 11, 5)) is None and sv.warning(None) is None
    said = sv.warning((25, 5, 2))
    assert "Slurm 25.05.2 is outside the versions slurmtrain is tested on (22.05.8 to 24.11.5)" in said


def test_the_controllers_version_comes_from_scontrol_show_config():
    assert sv.from_config(CONFIG_24) == (24, 11, 5)
    assert sv.from_config("SLURM_CONF = /etc/slurm.conf\n") is None


def test_installed_asks_slurmctld_then_slurmd(tmp_path):
    fake = tmp_path / "slurmd"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'slurm-wlm 24.11.5'\n")
    fake.chmod(0o755)
    found = {"slurmd": str(fake)}
    assert sv.installed(which=found.get) == (24, 11, 5)  # no slurmctld here: slurmd answers
    assert sv.installed(which={}.get) is None


def test_doctor_names_the_version_and_warns_outside_the_range():
    assert doctor_run._version_row((24, 11, 5)).verdict == PASS
    row = doctor_run._version_row((25, 11, 0))
    assert (row.figure, row.verdict) == ("Slurm 25.11.0", WARN) and "outside the versions" in row.detail
    assert doctor_run._version_row(None).verdict == WARN


def test_the_sandbox_disables_cgroups_from_24_05_and_writes_nothing_before():
    assert config.cgroup_conf((22, 5, 8)) is None and config.cgroup_conf(None) is None
    assert config.cgroup_conf((23, 11, 10)) is None  # 23.11's manual has no "disabled" (untested)
    for v in [(24, 5, 0), (24, 11, 5), (25, 5, 1)]:
        assert "CgroupPlugin=disabled" in config.cgroup_conf(v).splitlines()


def test_a_name_that_does_not_resolve_is_told_apart():
    assert hosts.resolves("localhost")
    assert not hosts.resolves("no-such-host.invalid")


def test_slurm_requeues_a_preempted_job_itself_from_24_05():
    assert not any(sv.requeues_preempted(v) for v in [(22, 5, 8), (23, 2, 7), (23, 11, 10), None])
    assert all(sv.requeues_preempted(v) for v in [(24, 5, 0), (24, 11, 5), (25, 5, 1)])
