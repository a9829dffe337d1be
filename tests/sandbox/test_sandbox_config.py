"""The sandbox's pure parts, no Slurm needed: config text, /etc/hosts block, settings, CLI help."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.errors import UsageError
from slurmtrain.sandbox import config, hosts
from slurmtrain.sandbox.layout import DEFAULT_STATE_DIR, Layout


def _conf(**kw) -> dict[str, str]:
    text = config.slurm_conf(config.Settings(**kw), Layout(Path("/s")))
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "NodeName", "PartitionName")):
            key, value = line.split("=", 1)
            out[key] = value
    return out


def test_conf_has_the_settings_that_make_it_work_in_a_container():
    conf = _conf()
    assert conf["ProctrackType"] == "proctrack/linuxproc"
    assert conf["TaskPlugin"] == "task/none"
    assert conf["SlurmdParameters"] == "config_overrides"
    assert conf["PreemptType"] == "preempt/partition_prio"
    assert conf["PreemptMode"] == "REQUEUE"
    assert conf["JobRequeue"] == "1" and conf["ReturnToService"] == "2"
    assert conf["AccountingStorageType"] == "accounting_storage/none"
    assert conf["AuthInfo"] == "socket=/s/munge/munge.socket"


def test_accounting_switches_storage_to_slurmdbd():
    conf = _conf(accounting=True)
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["JobAcctGatherType"] == "jobacct_gather/linux"


def test_nodes_and_partitions():
    text = config.slurm_conf(config.Settings(nodes=3, cpus_per_node=8), Layout(Path(DEFAULT_STATE_DIR)))
    assert "NodeName=stnode3 NodeHostname=stnode3 NodeAddr=127.0.0.13 Port=16823 CPUs=8" in text
    parts = [ln for ln in text.splitlines() if ln.startswith("PartitionName=")]
    assert [p.split()[0] for p in parts] == ["PartitionName=debug", "PartitionName=low", "PartitionName=high"]
    assert "Default=YES" in parts[0] and "GraceTime=60" in parts[1] and "PreemptMode=REQUEUE" in parts[1]


def test_other_state_dirs_get_other_ports_and_job_ids():
    assert Layout(Path(DEFAULT_STATE_DIR)).port_base == 16800
    assert Layout(Path("/tmp/elsewhere")).port_base != 16800
    # two sandboxes side by side: the local profile's rendezvous port follows the job id
    default = config.slurm_conf(config.Settings(), Layout(Path(DEFAULT_STATE_DIR)))
    other = config.slurm_conf(config.Settings(), Layout(Path("/var/lib/slurmtrain-sandbox-2")))
    first = {text: int(text.split("\nFirstJobId=")[1].split()[0]) for text in (default, other)}
    assert (first[default] % 2000, first[other] % 2000) == (1, 1001)  # + the state's clearings (below)
    firsts = {Layout(Path(f"/tmp/sandbox-{i}")).first_job_id % 2000 for i in range(30)}
    assert firsts == {501, 1001, 1501}


def test_a_cleared_controller_state_hands_out_ids_the_database_has_not_seen(tmp_path):
    layout = Layout(tmp_path)
    before = layout.first_job_id
    layout.epoch_file.write_text("1\n")  # cluster.up, where the nodes changed
    after = layout.first_job_id
    assert after == before + 100_000 and after % 2000 == before % 2000
    assert f"\nFirstJobId={after}\n" in config.slurm_conf(config.Settings(), layout)


def test_networked_nodes_are_on_the_bridge_and_the_controller_on_its_end():
    from slurmtrain.sandbox import netns

    layout = Layout(Path(DEFAULT_STATE_DIR))
    text = config.slurm_conf(config.Settings(nodes=2, network=True), layout)
    assert "NodeName=stnode2 NodeHostname=stnode2 NodeAddr=10.77.168.12 Port=16822" in text
    assert "\nSlurmctldHost=" in text and f"({netns.bridge_addr(layout)})\n" in text
    assert netns.bridge_addr(layout) == "10.77.168.1" and netns.bridge(layout) == "stbr168"
    assert config.hosts_lines(config.Settings(nodes=2, network=True), layout) == [
        "10.77.168.11 stnode1", "10.77.168.12 stnode2"]
    # each sandbox (port block) its own /24, bridge and namespaces: lanes side by side
    blocks = {netns.bridge_addr(Layout(Path(f"/var/lib/sb-{i}"))) for i in range(40)} | {"10.77.168.1"}
    assert len(blocks) == len({Layout(Path(f"/var/lib/sb-{i}")).port_base for i in range(40)}) + 1


def test_a_networked_slurmd_starts_in_its_node_with_its_own_tmp_and_shm():
    from slurmtrain.sandbox import netns

    layout = Layout(Path("/s"))
    argv = netns.wrap(layout, "stnode1", ["/usr/sbin/slurmd", "-N", "stnode1"])
    assert argv[:2] == ["nsenter", f"--net=/run/netns/{netns.namespace(layout, 'stnode1')}"]
    assert argv[-3:] == ["/usr/sbin/slurmd", "-N", "stnode1"]
    script = argv[argv.index("-ec") + 1]
    assert "hostname stnode1" in script and "mount --bind /s/nodes/stnode1/tmp /tmp" in script
    assert "mount --bind /s/nodes/stnode1/shm /dev/shm" in script
    assert "mount --bind /s/nodes/stnode1/hosts /etc/hosts" in script


def test_settings_saved_before_networked_nodes_read_as_loopback():
    assert config.Settings.from_json('{"nodes": 2, "cpus_per_node": 4, "accounting": false, '
                                     '"memory_mb_per_node": 4096}').network is False


@pytest.mark.parametrize("kw", [{"nodes": 0}, {"nodes": 65}, {"cpus_per_node": 0}])
def test_bad_settings_are_usage_errors(kw):
    with pytest.raises(UsageError, match="sandbox: --"):
        config.Settings(**kw)


def test_hosts_block_is_idempotent_and_keeps_other_lines(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("127.0.0.1 localhost\n")
    assert hosts.ensure(["127.0.0.11 stnode1", "127.0.0.12 stnode2"], f)
    first = f.read_text()
    assert not hosts.ensure(["127.0.0.11 stnode1", "127.0.0.12 stnode2"], f)
    assert f.read_text() == first
    assert hosts.ensure(["127.0.0.11 stnode1"], f) is False  # a smaller sandbox keeps stnode2
    assert first.startswith("127.0.0.1 localhost\n") and first.count("stnode1") == 1


def test_every_sandbox_command_has_help():
    runner = CliRunner()
    for cmd in ("up", "down", "status", "env"):
        result = runner.invoke(main, ["sandbox", cmd, "--help"])
        assert result.exit_code == 0, result.output
        assert len(result.output.split("\n\n")[1].strip()) > 20


def test_env_prints_an_export_line(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURMTRAIN_SANDBOX_DIR", str(tmp_path / "a b"))
    result = CliRunner().invoke(main, ["sandbox", "env"])
    assert result.output == f"export SLURM_CONF='{tmp_path}/a b/slurm.conf'\n"


def test_up_and_down_wait_for_each_other(tmp_path, monkeypatch):
    """Two sessions bringing the sandbox up at once each started a slurmctld; the lock
    makes the second wait for the first (here: `down` waits while the lock is held)."""
    import fcntl
    import threading

    from slurmtrain.sandbox import cluster

    monkeypatch.setenv("SLURMTRAIN_SANDBOX_DIR", str(tmp_path))
    said: list[str] = []
    with open(tmp_path / "updown.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=cluster.down, kwargs={"progress": said.append})
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and said == []  # blocked on the lock, did nothing
    worker.join(timeout=30)
    assert not worker.is_alive() and said == ["sandbox was not running"]


def test_a_sandbox_takes_down_its_own_job_processes_only(tmp_path):
    """Sandboxes side by side share node names: `down` tells their job processes apart by the
    state directory in SLURM_CONF, even where one directory's name begins with the other's."""
    import subprocess
    import sys
    import time

    from slurmtrain.sandbox import cluster

    mine, other = Layout(tmp_path / "sandbox"), Layout(tmp_path / "sandbox-slurm24")
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_CONF": str(other.slurm_conf)}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        for _ in range(50):  # until its environment is readable
            if proc.pid in cluster._strays(other):
                break
            time.sleep(0.1)
        assert proc.pid in cluster._strays(other)
        assert proc.pid not in cluster._strays(mine)
    finally:
        proc.kill()
        proc.wait()
