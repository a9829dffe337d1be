"""The sandbox's settings and the Slurm configuration files they produce (pure: no I/O).

Every "node" is a ``slurmd`` started with ``-N <name>`` on this one machine. Each has
its own name, its own loopback address (127.0.0.11, 127.0.0.12, ...: the whole
127/8 block reaches this host, so a process on "node 2" can listen on its node's
name and one on "node 1" can connect to it) and its own port.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass

from ..errors import UsageError
from . import netns
from .layout import Layout

NODE_PREFIX = "stnode"
"""Node names are ``stnode1``, ``stnode2``, ...: unlikely to clash with a real host."""

CLUSTER_NAME = "stsandbox"
# Ports are offsets from Layout.port_base (16800 for the default state directory).
CTLD_PORT = 17
DBD_PORT = 19
MYSQL_PORT = 6
FIRST_SLURMD_PORT = 21
FIRST_NODE_ADDR = 11  # 127.0.0.11 is node 1
MAX_NODES = 64

PARTITIONS = ("debug", "low", "high")
LOW_GRACE_TIME_S = 60


@dataclass(frozen=True)
class Settings:
    """What ``sandbox up`` was asked for; a running sandbox is compared against it."""

    nodes: int = 2
    cpus_per_node: int = 4
    accounting: bool = False
    memory_mb_per_node: int = 4096
    network: bool = False  # each node in namespaces of its own (netns.py), else loopback addresses

    def __post_init__(self):
        if not isinstance(self.nodes, int) or not 1 <= self.nodes <= MAX_NODES:
            raise UsageError(f"sandbox: --nodes must be between 1 and {MAX_NODES}, got {self.nodes!r}")
        if not isinstance(self.cpus_per_node, int) or not 1 <= self.cpus_per_node <= 256:
            raise UsageError(
                f"sandbox: --cpus-per-node must be between 1 and 256, got {self.cpus_per_node!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    def describe(self) -> str:
        acct = "with accounting" if self.accounting else "without accounting"
        net = ", networked nodes" if self.network else ""
        return f"{self.nodes} node(s) x {self.cpus_per_node} CPUs, {acct}{net}"

    @classmethod
    def from_json(cls, text: str) -> "Settings":
        return cls(**json.loads(text))


def node_names(settings: Settings) -> list[str]:
    return [f"{NODE_PREFIX}{i}" for i in range(1, settings.nodes + 1)]


def node_addr(index: int) -> str:
    """Loopback address of node ``index`` (1-based)."""
    return f"127.0.0.{FIRST_NODE_ADDR + index - 1}"


def node_port(layout: Layout, index: int) -> int:
    return layout.port_base + FIRST_SLURMD_PORT + index - 1


def node_addrs(settings: Settings, layout: Layout) -> dict[str, str]:
    """Each node's address: on the sandbox's bridge for networked nodes, else on loopback."""
    return {name: netns.node_addr(layout, i) if settings.network else node_addr(i)
            for i, name in enumerate(node_names(settings), start=1)}


def controller_addr(settings: Settings, layout: Layout) -> str:
    """Where the nodes reach slurmctld (and slurmdbd): this machine's end of the bridge."""
    return netns.bridge_addr(layout) if settings.network else "127.0.0.1"


def hosts_lines(settings: Settings, layout: Layout) -> list[str]:
    """The ``/etc/hosts`` lines that make node names resolve."""
    return [f"{addr} {name}" for name, addr in node_addrs(settings, layout).items()]


def controller_host() -> str:
    # slurmctld only starts on a host named in SlurmctldHost, so use this machine's name.
    return socket.gethostname().split(".")[0]


def slurm_conf(settings: Settings, layout: Layout) -> str:
    """Text of slurm.conf for these settings."""
    lines = [*_daemons(layout, controller_addr(settings, layout)), *_scheduling(layout),
             *_accounting(settings, layout), "",
             *_nodes_and_partitions(settings, layout)]
    return "\n".join(lines)


def _daemons(layout: Layout, controller: str) -> list[str]:
    """Who the controller and the nodes are, where their state, pids and logs live."""
    return [
        "# Written by `slurmtrain sandbox up`; rewritten on every start. Do not edit.",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={controller_host()}({controller})",
        f"SlurmctldPort={layout.port_base + CTLD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # Our own munged, so a system munge (or its absence) does not matter.
        f"AuthInfo=socket={layout.munge_socket}",
        f"StateSaveLocation={layout.ctld_state}",
        f"SlurmdSpoolDir={layout.spool}/slurmd-%n",
        f"SlurmctldPidFile={layout.pid_file('slurmctld')}",
        f"SlurmdPidFile={layout.run_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log('slurmctld')}",
        f"SlurmdLogFile={layout.logs}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
    ]


def _scheduling(layout: Layout) -> list[str]:
    """How jobs are placed, tracked, requeued and preempted."""
    return [
        # No systemd or cgroups in a container: track processes by parentage, bind nothing.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "PropagateResourceLimits=NONE",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        # Nodes claim the CPUs and memory written here, not what the machine has.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "JobRequeue=1",
        # Refuse at submit time what can never run (more nodes than a partition has), as
        # most production clusters do, instead of leaving it pending forever.
        "EnforcePartLimits=ALL",
        "MinJobAge=600",
        f"FirstJobId={layout.first_job_id}",
        "KillWait=30",
        "MessageTimeout=10",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "Waittime=0",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=5,sched_min_interval=100000",
        # Partition priority tiers decide who preempts whom; only `low` is preemptible.
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
    ]


def _accounting(settings: Settings, layout: Layout) -> list[str]:
    """slurmdbd where the sandbox keeps accounting (sacct), else none."""
    if settings.accounting:
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={controller_addr(settings, layout)}",
            f"AccountingStoragePort={layout.port_base + DBD_PORT}",
            # For slurmdbd connections Slurm takes the munge socket from here, not AuthInfo.
            f"AccountingStoragePass={layout.munge_socket}",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=30",
        ]
    return [
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
    ]


def _nodes_and_partitions(settings: Settings, layout: Layout) -> list[str]:
    """Each node's address and port; the partitions: only `low` is preemptible."""
    names = node_names(settings)
    node_list = ",".join(names)
    addrs = node_addrs(settings, layout)
    lines = []
    for i, name in enumerate(names, start=1):
        lines.append(
            f"NodeName={name} NodeHostname={name} NodeAddr={addrs[name]} Port={node_port(layout, i)} "
            f"CPUs={settings.cpus_per_node} RealMemory={settings.memory_mb_per_node} State=UNKNOWN"
        )
    lines += [
        "",
        f"PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP "
        "PriorityTier=1 PreemptMode=OFF",
        f"PartitionName=low Nodes={node_list} MaxTime=INFINITE State=UP "
        f"PriorityTier=1 PreemptMode=REQUEUE GraceTime={LOW_GRACE_TIME_S}",
        f"PartitionName=high Nodes={node_list} MaxTime=INFINITE State=UP "
        "PriorityTier=10 PreemptMode=OFF",
        "",
    ]
    return lines


# Slurm 24.05 and later load a cgroup plugin in slurmd even with proctrack/linuxproc and
# task/none, and slurmd exits where no cgroup filesystem is mounted (a container, a chroot);
# "disabled" is theirs alone: 22.05 refuses the value (slurmd exits), 23.11's manual lacks it.
CGROUP_DISABLED_SINCE = (24, 5)


def cgroup_conf(version: tuple[int, int, int] | None) -> str | None:
    """Text of cgroup.conf for this Slurm version, or None where it needs none."""
    if version is None or version[:2] < CGROUP_DISABLED_SINCE:
        return None
    return ("# Written by `slurmtrain sandbox up` for Slurm 24.05 and later. Do not edit.\n"
            "# The sandbox tracks processes by parentage (proctrack/linuxproc): no cgroups.\n"
            "CgroupPlugin=disabled\n")


def slurmdbd_conf(layout: Layout) -> str:
    return "\n".join([
        "# Written by `slurmtrain sandbox up --accounting`. Do not edit.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={layout.port_base + DBD_PORT}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={layout.log('slurmdbd')}",
        f"PidFile={layout.pid_file('slurmdbd')}",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={layout.port_base + MYSQL_PORT}",
        "StorageUser=slurm",
        "StoragePass=slurm",
        "StorageLoc=slurm_acct_db",
        "",
    ])
