"""Networked sandbox nodes (`slurmtrain sandbox up --network`, slurmtrain/sandbox/netns.py):
each node a machine of its own, its network namespace (eth0 on the sandbox's bridge), its
hostname, its private /tmp and /dev/shm; a two-node job talks over eth0, not loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_util import PROGRAM, cli, ranks, run_dir, submit, wait_final  # noqa: E402

pytestmark = pytest.mark.slurm

PROBE = r"""
import json, os, socket, subprocess
node = os.environ["SLURMD_NODENAME"]
open(f"/tmp/mine-{node}", "w").close()
open(f"/dev/shm/mine-{node}", "w").close()
addrs = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout
mine = lambda d: sorted(n for n in os.listdir(d) if n.startswith("mine-"))  # short lines: srun interleaves long ones
print(json.dumps({"node": node, "hostname": socket.gethostname(), "tmp": mine("/tmp"),
                  "shm": sorted(os.listdir("/dev/shm")), "resolves": socket.gethostbyname(node),
                  "addrs": {a["ifname"]: a["addr_info"][0]["local"] for a in json.loads(addrs)}}))
"""


def test_each_node_has_its_own_name_address_tmp_and_shm(sandbox_networked, tmp_path):
    proc = subprocess.run(["srun", "-N2", "--ntasks-per-node=1", "--time=2", sys.executable, "-c", PROBE],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    seen = {r["node"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert sorted(seen) == ["stnode1", "stnode2"], proc.stdout
    for node, r in seen.items():
        addr = sandbox_networked.node_addrs[node]
        assert r["hostname"] == node and r["resolves"] == addr, r
        assert r["addrs"]["eth0"] == addr and set(r["addrs"]) == {"lo", "eth0"}, r
        other = next(n for n in seen if n != node)
        # each sees its own file, not the other node's; this machine's /tmp and /dev/shm see neither
        assert f"mine-{node}" in r["tmp"] and f"mine-{other}" not in r["tmp"], r
        assert r["shm"] == [f"mine-{node}"], r
        assert not Path(f"/tmp/mine-{node}").exists() and not Path(f"/dev/shm/mine-{node}").exists()
        here = Path(sandbox_networked.state_dir) / "nodes" / node
        assert (here / "tmp" / f"mine-{node}").exists() and (here / "shm" / f"mine-{node}").exists()  # seen from here


@pytest.mark.parametrize("ifname, gloo", [(None, None), ("et", "eth0"), ("^lo,docker", None)],
                         ids=["hostname", "nccl-prefix", "nccl-exclusion"])
def test_a_two_node_job_talks_over_eth0_and_completes(sandbox_networked, tmp_path, ifname, gloo):
    """fabric.socket_ifname is NCCL's syntax (a prefix, ^ to exclude); gloo takes whole names
    only ("Unable to find address for: ^lo" from an exclusion list): each node's task gives it
    the interface the prefix names, and leaves it to the hostname's address for an exclusion."""
    sets = ["--set", f"fabric.socket_ifname={ifname}"] if ifname else []
    name = submit(tmp_path, "--profile", "local", "--nodes", "2", "--name", "over-eth0", *sets, "--", "python",
                  str(PROGRAM))
    final = wait_final(tmp_path, [name], timeout=240)[name]
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), cli(tmp_path, "logs", name).stdout[-3000:]
    got = ranks(tmp_path, name)
    assert sorted(r["rank"] for r in got) == [0, 1, 2, 3] and {r["sum"] for r in got} == {10.0}, got
    assert sorted({r["node"] for r in got}) == ["stnode1", "stnode2"], got
    assert {r["gloo_ifname"] for r in got} == {gloo}, got


def _flap(cwd: Path, node: str, times: int, down: int, up: int) -> None:
    """``node``'s link down ``down`` seconds, then up ``up`` seconds, ``times`` times."""
    for _ in range(times):
        assert cli(cwd, "sandbox", "fault", node, "link-down", "--for", str(down)).returncode == 0
        time.sleep(down + up)


def test_a_link_flapping_at_start_up_delays_the_start_and_the_job_completes(sandbox_networked, tmp_path):
    """stnode2's link down 4 s and up 6 s, three times, from the submission on. Where a cut
    meets srun's launch of the tasks, srun cannot start them there and ends at once: the
    supervisor says so and launches again (nothing ran); torchrun's rendezvous and gloo's
    connections retry through a cut (a dropped packet is resent). The job completes in one
    start, within the rendezvous timeout: no hang, no node blamed, no requeue."""
    name = submit(tmp_path, "--profile", "local", "--nodes", "2", "--name", "flapping", "--", "python", str(PROGRAM))
    flapping = threading.Thread(target=_flap, args=(tmp_path, "stnode2", 3, 4, 6))
    flapping.start()  # at once: the first cut comes before the job's first step on stnode2
    try:
        final = wait_final(tmp_path, [name], timeout=240)[name]
    finally:
        flapping.join()
        cli(tmp_path, "sandbox", "fault", "stnode2", "heal")
    log = cli(tmp_path, "logs", name).stdout
    assert (final["state"], final["restarts"]) == ("COMPLETED", 0), log[-3000:]
    got = ranks(tmp_path, name)
    assert sorted(r["rank"] for r in got) == [0, 1, 2, 3] and {r["sum"] for r in got} == {10.0}, got
    evs = [json.loads(line) for line in (run_dir(tmp_path, name) / "events.jsonl").read_text().splitlines()]
    took = evs[-1]["time"] - evs[0]["time"]
    assert took < 120, (took, evs)  # the profile's resilience.rendezvous_timeout
    again = [e for e in evs if e["event"] == "relaunched"]
    assert all(e["cause"] == "launch failed" and e["nodes"] == "stnode2" for e in again), evs
    assert ("srun could not start the tasks on stnode2" in log) == bool(again), log[-3000:]
    assert not [e for e in evs if e["event"] in ("hang", "nodes_lost", "watchdog_timeout")], evs
    assert "stnode2" not in cli(tmp_path, "nodes").stdout


def test_a_profile_naming_an_interface_the_nodes_lack_fails_in_one_line_before_training(sandbox_networked,
                                                                                       tmp_path):
    """fabric.socket_ifname=ib0 on nodes that have eth0: each node's setup says so, no node
    is blamed (the profile's doing), the job ends at start-up: no hang, no requeue."""
    name = submit(tmp_path, "--profile", "local", "--nodes", "2", "--name", "bad-ifname",
                  "--set", "fabric.socket_ifname=ib0", "--", "python", str(PROGRAM))
    final = wait_final(tmp_path, [name], timeout=120)[name]
    assert final["state"] == "FAILED" and final["restarts"] == 0, final
    log = (tmp_path / "runs" / name / "logs").glob("job-*.out")
    said = "".join(p.read_text() for p in log)
    assert ("setup failed on every node (stnode1 stnode2), so no node is to blame; stnode1: "
            "fabric.socket_ifname=ib0: no such interface on stnode1 (it has: lo eth0)") in said, said
    assert not ranks(tmp_path, name)  # the program never started
    nodes = cli(tmp_path, "nodes")
    assert "stnode1" not in nodes.stdout and "stnode2" not in nodes.stdout, nodes.stdout


SINK = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); print("ready", flush=True)
while True:
    c, _ = s.accept()
    while c.recv(65536):
        pass
    c.close()
"""


def _send(addr: str, port: int, nbytes: int, timeout: float) -> float | None:
    """Seconds to send ``nbytes`` to ``addr:port`` from this machine; None if it could not."""
    import socket
    import time
    start = time.monotonic()
    try:
        with socket.create_connection((addr, port), timeout=timeout) as s:
            s.sendall(b"x" * nbytes)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # the sink closes once it has read everything
    except OSError:
        return None
    return time.monotonic() - start


def test_sandbox_faults_cut_slow_and_heal_a_nodes_link(sandbox_networked, tmp_path):
    from slurmtrain.sandbox import netns
    from slurmtrain.sandbox.layout import Layout

    layout, addr, port = Layout(Path(sandbox_networked.state_dir)), sandbox_networked.node_addrs["stnode2"], 29990
    sink = subprocess.Popen(["nsenter", f"--net=/run/netns/{netns.namespace(layout, 'stnode2')}", sys.executable,
                             "-c", SINK, str(port)], stdout=subprocess.PIPE, text=True)

    def fault(*args: str) -> str:
        proc = cli(tmp_path, "sandbox", "fault", "stnode2", *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    try:
        assert sink.stdout.readline().strip() == "ready"
        assert _send(addr, port, 10_000, 5) is not None
        assert "stnode2's link is down" in fault("link-down")
        assert _send(addr, port, 10_000, 2) is None  # packets go nowhere: the connection times out
        fault("heal")
        assert _send(addr, port, 10_000, 5) is not None
        fault("link-down", "--for", "2")
        assert _send(addr, port, 10_000, 1) is None
        assert _send(addr, port, 10_000, 15) is not None  # back up by itself
        fault("link-down", "--for", "2")
        assert "stnode2's link is down" in fault("link-down")  # for good: the earlier timer is cancelled
        assert _send(addr, port, 10_000, 4) is None
        fault("heal")
        full = _send(addr, port, 400_000, 10)
        assert "limited to 1mbit each way" in fault("slow-link", "--rate", "1mbit")
        slow = _send(addr, port, 400_000, 30)
        assert slow is not None and slow >= 2.5 and slow > 5 * full, (slow, full)  # 3.2 Mbit at 1 Mbit/s
        fault("heal")
        assert _send(addr, port, 400_000, 10) < 1.0
    finally:
        sink.kill()
        cli(tmp_path, "sandbox", "fault", "stnode2", "heal")
    bad = cli(tmp_path, "sandbox", "fault", "stnode9", "link-down")
    assert bad.returncode == 2 and "no node 'stnode9' (the nodes: stnode1 stnode2 stnode3)" in bad.stderr, bad.stderr
    rate = cli(tmp_path, "sandbox", "fault", "stnode2", "slow-link", "--rate", "fast")
    assert rate.returncode == 2 and "--rate 'fast': expected a rate as tc takes it" in rate.stderr, rate.stderr


def test_doctor_names_the_node_on_a_slow_link(sandbox_networked, tmp_path):
    """stnode2's link limited to 1 Mbit/s each way: the all-reduce of all three nodes slows
    to its pace, and the pairwise all-reduces (each node with its ring neighbours) tell which
    node it is: both pairs of stnode2 are slow, each other node has one fast pair. The
    message shrinks to what the link carries in time (4 MiB took half a minute a
    collective there: doctor never finished and blamed a node that only waited)."""
    import waiting

    assert cli(tmp_path, "sandbox", "fault", "stnode2", "slow-link", "--rate", "1mbit").returncode == 0
    try:
        proc = waiting.run([sys.executable, "-m", "slurmtrain", "doctor", "-N", "3", "--checks", "allreduce",
                            "--seconds", "1", "--runs-dir", "doctor"], "doctor on a slow link", [tmp_path / "doctor"],
                           cwd=tmp_path, env=dict(os.environ))
    finally:
        cli(tmp_path, "sandbox", "fault", "stnode2", "heal")
    [path] = (tmp_path / "doctor").glob("doctor-*/doctor.json")
    rows = {r["node"]: r for r in json.loads(path.read_text())["rows"] if r["check"] == "allreduce"}
    assert sorted(rows) == ["stnode1", "stnode2", "stnode3"], proc.stdout + proc.stderr
    slow = rows["stnode2"]
    assert slow["verdict"] == "warn" and slow["detail"].startswith("slow link: pairs with stnode1 "), slow
    assert "with stnode3 " in slow["detail"], slow
    assert [rows[n]["verdict"] for n in ("stnode1", "stnode3")] == ["pass", "pass"], rows
    assert "(64 KiB x " in slow["figure"] and "4 MiB too slow here)" in slow["figure"], slow
    assert "stnode2  allreduce" in proc.stdout and "slow link" in proc.stdout, proc.stdout


def test_down_removes_the_namespaces_and_the_bridge(sandbox_networked):
    from slurmtrain import sandbox as lib
    from slurmtrain.sandbox import netns
    from slurmtrain.sandbox.layout import Layout

    layout = Layout(Path(sandbox_networked.state_dir))
    spaces = [netns.namespace(layout, n) for n in sandbox_networked.nodes]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert all(ns in listed for ns in spaces), listed
    # a process no Slurm daemon knows, still in a node's namespace, would keep the namespace
    # and its veth pair alive past `ip netns del` (and the next `up` failed on the veth: CI)
    stray = subprocess.Popen(["nsenter", f"--net=/run/netns/{spaces[1]}", "sleep", "600"], start_new_session=True)
    lib.down(progress=print)
    assert stray.wait(timeout=10) == -9
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in spaces), listed
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert netns.bridge(layout) not in links, links
    assert f"stv{netns.bridge(layout)[4:]}n" not in links, links  # every node's veth pair
    assert not any(os.path.ismount(netns.node_shm(layout, n)) for n in sandbox_networked.nodes)
    # an address of the sandbox's block, now without its bridge, goes nowhere
    route = subprocess.run(["ip", "route", "get", sandbox_networked.node_addrs["stnode1"]],
                           capture_output=True, text=True)
    assert route.returncode != 0 or "unreachable" in route.stdout, route.stdout
