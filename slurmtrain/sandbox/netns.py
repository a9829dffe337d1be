"""Networked sandbox nodes (``sandbox up --network``): each node a machine of its own.

Each node's slurmd, and every step it starts, runs in the node's own network namespace
(``eth0`` with an address on the sandbox's bridge, the "switch"), its own UTS namespace
(``hostname`` is the node's name) and its own mount namespace (a private ``/tmp`` and
``/dev/shm``). The controller, munged and the login side stay in this machine's namespaces
and reach the nodes over the bridge. A node's link can then be cut (``ip link set ... down``)
or slowed (``tc tbf``) like a real one.

The private ``/tmp`` is a directory of the state directory bound there, so a test can look
into it. What a job needs from this machine's ``/tmp`` (a checkout or a virtual environment
kept there, pytest's temporary directories) is bound back in: the sandbox's shared file
system, as a cluster's home and project directories are.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from .layout import Layout

INTERFACE = "eth0"   # the nodes' interface, as on most clusters' compute nodes
SUBNET = "10.77"     # 10.77.<sandbox>.0/24: one /24 a state directory


def _index(layout: Layout) -> int:
    """This sandbox's number (its port block): its subnet, bridge and namespace names."""
    return layout.port_base // 100 % 250


def bridge(layout: Layout) -> str:
    return f"stbr{_index(layout)}"


def bridge_addr(layout: Layout) -> str:
    return f"{SUBNET}.{_index(layout)}.1"


def node_addr(layout: Layout, index: int) -> str:
    """Node ``index``'s (1-based) address on the bridge."""
    return f"{SUBNET}.{_index(layout)}.{10 + index}"


def namespace(layout: Layout, node: str) -> str:
    return f"st{_index(layout)}-{node}"


def _veth(layout: Layout, index: int) -> str:
    return f"stv{_index(layout)}n{index}"  # at most 15 characters: stv249n64


def node_tmp(layout: Layout, node: str) -> Path:
    """The directory that is the node's ``/tmp``."""
    return layout.root / "nodes" / node / "tmp"


def unavailable_reason() -> str | None:
    """Why networked nodes cannot be made here, or None."""
    if os.geteuid() != 0:
        return "networked nodes need root (network namespaces, a bridge)"
    for tool in ("ip", "nsenter", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"networked nodes need `{tool}` (iproute2, util-linux)"
    probe = "stprobe-netns"
    made = _ip("netns", "add", probe)
    _ip("netns", "del", probe)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    return None


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _must(*args: str, tool: str = "ip") -> None:
    """``tool ARGS`` (ip, tc, mount), or SandboxError saying what failed."""
    proc = subprocess.run([tool, *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        from .errors import SandboxError
        raise SandboxError(f"`{tool} {' '.join(args)}` failed: {proc.stderr.strip()}")


def make(layout: Layout, nodes: list[str], hosts: list[str]) -> None:
    """The bridge and each node's namespace, link and address (again from scratch)."""
    remove(layout, nodes)
    # The whole block is unreachable from here unless a bridge of ours holds it: an address
    # of a sandbox that is down never leaves this machine through the default route.
    _must("route", "replace", "unreachable", f"{SUBNET}.0.0/16")
    br = bridge(layout)
    _must("link", "add", br, "type", "bridge")
    _must("addr", "add", f"{bridge_addr(layout)}/24", "dev", br)
    _must("link", "set", br, "up")
    for i, node in enumerate(nodes, start=1):
        ns, veth = namespace(layout, node), _veth(layout, i)
        _must("netns", "add", ns)
        _must("link", "add", veth, "type", "veth", "peer", "name", INTERFACE, "netns", ns)
        _must("link", "set", veth, "master", br, "up")
        _must("-n", ns, "addr", "add", f"{node_addr(layout, i)}/24", "dev", INTERFACE)
        _must("-n", ns, "link", "set", INTERFACE, "up")
        _must("-n", ns, "link", "set", "lo", "up")
        node_tmp(layout, node).mkdir(parents=True, exist_ok=True)
        _hosts(layout, node).write_text("\n".join(["127.0.0.1 localhost", *hosts]) + "\n")
        node_tmp(layout, node).chmod(0o1777)
        # Memory, as /dev/shm is; mounted on this side so that a test can look into it.
        node_shm(layout, node).mkdir(parents=True, exist_ok=True)
        _must("-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(node_shm(layout, node)), tool="mount")


def remove(layout: Layout, nodes: list[str]) -> None:
    """The namespaces, their links and the bridge; what is not there is skipped.

    A namespace outlives `ip netns del` while a process is still in it, and its veth pair
    with it: a task that outlived its slurmd left `stvNn2` behind, and the next `up` could
    not make it again (found in CI). So the stragglers are killed and the pair deleted from
    this side, which takes the node's end with it."""
    for i, node in enumerate(nodes, start=1):
        _kill_all_in(namespace(layout, node))
        _ip("link", "del", _veth(layout, i))
        _ip("netns", "del", namespace(layout, node))
        if os.path.ismount(node_shm(layout, node)):
            subprocess.run(["umount", "-l", str(node_shm(layout, node))], capture_output=True, timeout=30)
    _ip("link", "del", bridge(layout))


def node_shm(layout: Layout, node: str) -> Path:
    """The tmpfs that is the node's ``/dev/shm``."""
    return layout.root / "nodes" / node / "shm"




def _hosts(layout: Layout, node: str) -> Path:
    """The node's /etc/hosts: every node's name on the bridge."""
    return layout.root / "nodes" / node / "hosts"


def shared_under_tmp() -> list[Path]:
    """This machine's paths under /tmp that a job needs on every node: the checkout slurmtrain
    runs from, the Python environment, pytest's temporary directories."""
    here = Path(__file__).resolve().parents[2]
    candidates = [here, Path(sys.prefix).resolve(), *Path("/tmp").glob("pytest-of-*")]
    return sorted({p for p in candidates if p.is_dir() and Path("/tmp") in p.parents})


def wrap(layout: Layout, node: str, command: list[str]) -> list[str]:
    """``command`` run on the node: in its network namespace, with its hostname, private
    /tmp and /dev/shm, and the shared paths under /tmp bound back in."""
    # The shared paths go aside (bound under the state directory) before /tmp is covered,
    # then back in under the node's /tmp.
    shared = shared_under_tmp()
    aside = [layout.root / "nodes" / node / "shared" / str(i) for i in range(len(shared))]
    binds = [f"mkdir -p {shlex.quote(str(a))} && mount --bind {shlex.quote(str(p))} {shlex.quote(str(a))}"
             for p, a in zip(shared, aside)]
    binds += [f"mount --bind {shlex.quote(str(node_tmp(layout, node)))} /tmp",
              f"mount --bind {shlex.quote(str(node_shm(layout, node)))} /dev/shm",
              f"mount --bind {shlex.quote(str(_hosts(layout, node)))} /etc/hosts"]
    binds += [f"mkdir -p {shlex.quote(str(p))} && mount --bind {shlex.quote(str(a))} {shlex.quote(str(p))}"
              for p, a in zip(shared, aside)]
    script = "; ".join([f"hostname {shlex.quote(node)}", *binds, 'exec "$@"'])
    # nsenter, not `ip netns exec`: that one mounts a sysfs of its own over /sys, and slurmd
    # wants this machine's /sys/fs/cgroup.
    return ["nsenter", f"--net=/run/netns/{namespace(layout, node)}", "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-ec", script, "sh", *command]


# ---- faults through the network (`slurmtrain sandbox fault`) -------------------------------

FAULTS = ("link-down", "link-up", "slow-link", "heal", "power-off")  # power-on: cli/sandbox.py (slurmd again)


def _node_index(node: str, nodes: list[str]) -> int:
    return nodes.index(node) + 1


def _timer_file(layout: Layout, node: str) -> Path:
    return layout.run_dir / f"link-timer-{node}.pid"


def _cancel_timer(layout: Layout, node: str) -> None:
    """End the pending `link-down --for` of ``node``, if any: it would bring the link up in
    the middle of a later fault (found when one test's timer ended the next test's cut)."""
    path = _timer_file(layout, node)
    try:
        pid = int(path.read_text())
        path.unlink()
        if str(path) in Path(f"/proc/{pid}/cmdline").read_text():  # that timer still, not a reused pid
            os.killpg(pid, signal.SIGKILL)  # setsid: the timer's shell leads its own group, its sleep in it
    except (OSError, ValueError):
        pass


def _kill_all_in(ns: str) -> int:
    """SIGKILL every process in network namespace ``ns``; how many there were."""
    pids = [int(p) for p in _ip("netns", "pids", ns).stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def _power_off(veth: str, ns: str, node: str) -> str:
    """The machine dies at once: its link down and every process in its network namespace
    (its slurmd, the step daemons, the job's tasks) SIGKILLed, nothing told."""
    _must("link", "set", veth, "down")
    killed = _kill_all_in(ns)
    return (f"{node} is off: its link down, its {killed} process(es) killed (slurmd, the steps, their tasks); "
            f"`slurmtrain sandbox fault {node} power-on` starts it again")


def fault(layout: Layout, nodes: list[str], node: str, what: str, rate: str = "10mbit",
          seconds: float | None = None) -> str:
    """Do ``what`` to ``node``'s link; returns what was done, in words.

    ``link-down``: its end on the bridge goes down: the node's packets go nowhere, its
    processes live on, as when a NIC, cable or switch port fails (``seconds``: back up after
    that long). ``slow-link``: both directions limited to ``rate`` (``tc tbf``). ``heal``:
    the link up, no limit. ``power-off``: the machine dies (:func:`_power_off`)."""
    veth, ns = _veth(layout, _node_index(node, nodes)), namespace(layout, node)
    _cancel_timer(layout, node)  # a later fault or heal overrides an earlier `--for`
    if what == "link-down":
        _must("link", "set", veth, "down")
        if seconds:
            done = shlex.quote(str(_timer_file(layout, node)))
            timer = subprocess.Popen(["setsid", "sh", "-c", f"sleep {seconds:g}; ip link set {veth} up; rm -f {done}"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _timer_file(layout, node).write_text(str(timer.pid))
            return f"{node}'s link is down for {seconds:g} s"
        return f"{node}'s link is down"
    if what == "link-up":
        _must("link", "set", veth, "up")
        return f"{node}'s link is up"
    if what == "slow-link":
        tbf = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
        _must("-n", ns, "link", "set", INTERFACE, "up")  # nothing to slow on a link that is down
        _must("qdisc", "replace", "dev", veth, *tbf, tool="tc")             # toward the node
        _must("-n", ns, "qdisc", "replace", "dev", INTERFACE, *tbf, tool="tc")  # from it
        return f"{node}'s link is limited to {rate} each way"
    if what == "power-off":
        return _power_off(veth, ns, node)
    if what == "heal":
        _must("link", "set", veth, "up")
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], capture_output=True, timeout=30)
        subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", INTERFACE, "root"], capture_output=True, timeout=30)
        return f"{node}'s link is up, at full speed"
    raise ValueError(f"unknown fault {what!r} (known: {', '.join(FAULTS)})")
