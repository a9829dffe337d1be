"""Commands: sandbox up/down/status/env — a real Slurm cluster on this one machine.

Light to import: the sandbox library is loaded inside each command.
"""

from __future__ import annotations

import re
import shlex

import click

from .base import main


def _progress(message: str) -> None:
    click.echo(f"sandbox: {message}", err=True)


@main.group()
def sandbox() -> None:
    """A real Slurm cluster on this machine, for trying jobs and for tests.

    Runs munged, slurmctld and one slurmd per node (stnode1, stnode2, ...: each
    with its own loopback address, 127.0.0.11, 127.0.0.12, ...), as root. State,
    configuration and logs live in /var/lib/slurmtrain-sandbox, or in
    $SLURMTRAIN_SANDBOX_DIR. Partitions: debug (default), low (preemptible:
    requeued, 60 s grace) and high (preempts low).

    \b
      slurmtrain sandbox up --nodes 2
      eval "$(slurmtrain sandbox env)"
      sbatch -N 2 --wrap 'srun hostname'
      slurmtrain sandbox down
    """


@sandbox.command()
@click.option("--nodes", "-N", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Number of slurmd 'nodes' to run.")
@click.option("--cpus-per-node", "-c", default=4, show_default=True, type=click.IntRange(1, 256),
              help="CPUs each node offers Slurm (may exceed this machine's cores).")
@click.option("--accounting/--no-accounting", default=False, show_default=True,
              help="Also run MariaDB and slurmdbd so that sacct works.")
@click.option("--network/--loopback", default=False, show_default=True,
              help="Each node a machine of its own: its network namespace (eth0 on the sandbox's "
                   "bridge), its hostname, a private /tmp and /dev/shm (root only).")
def up(nodes: int, cpus_per_node: int, accounting: bool, network: bool) -> None:
    """Start the sandbox (installing Slurm with apt-get if missing).

    Does nothing if it already runs with the same settings; refuses if it runs
    with other settings (run `slurmtrain sandbox down` first). Waits until every
    node is idle, or says which daemon failed and where its log is.
    """
    from .. import sandbox as lib

    info = lib.up(nodes=nodes, cpus_per_node=cpus_per_node, accounting=accounting, progress=_progress,
                  network=network)
    click.echo(f"SLURM_CONF={info.slurm_conf}")


@sandbox.command()
def down() -> None:
    """Stop every daemon the sandbox started, and the jobs still running on it."""
    from .. import sandbox as lib

    lib.down(progress=_progress)


@sandbox.command()
def status() -> None:
    """Show the sandbox's nodes, partitions, daemons and log files (exit 3 if not running)."""
    from .. import sandbox as lib

    info = lib.status()
    if info is None:
        click.echo(f"sandbox: not running (state directory: {lib.state_dir()})")
        raise SystemExit(3)
    s = info.settings
    click.echo(f"state dir:   {info.state_dir}")
    click.echo(f"SLURM_CONF:  {info.slurm_conf}")
    click.echo(f"settings:    {s.describe()}")
    click.echo(f"partitions:  {', '.join(info.partitions)} (debug is the default)")
    click.echo("nodes:")
    for node in info.nodes:
        state = info.node_states.get(node, "unknown (slurmctld does not answer)")
        click.echo(f"  {node:<10} {info.node_addrs[node]:<12} {state}")
    click.echo("daemons:")
    for name, log in info.logs.items():
        pid = info.pids.get(name)
        click.echo(f"  {name:<16} {('pid ' + str(pid)) if pid else 'NOT RUNNING':<11} log: {log}")


@sandbox.command()
def env() -> None:
    """Print `export SLURM_CONF=...` for the sandbox: eval "$(slurmtrain sandbox env)"."""
    from .. import sandbox as lib

    click.echo(f"export SLURM_CONF={shlex.quote(str(lib.state_dir() / 'slurm.conf'))}")


_TC_RATE = re.compile(r"\d+(\.\d+)?([kmgt]?(bit|bps))", re.I)  # tc's rates: 10mbit, 500kbit, 1gbit, 2mbps


@sandbox.command()
@click.argument("node")
@click.argument("what", type=click.Choice(["link-down", "link-up", "slow-link", "heal", "power-off", "power-on"]))
@click.option("--for", "seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="link-down: bring the link back up after this many seconds.")
@click.option("--rate", default="10mbit", show_default=True, help="slow-link: each direction's rate (tc's units).")
def fault(node: str, what: str, seconds: float | None, rate: str) -> None:
    """A fault through a networked node's link (`sandbox up --network`).

    \b
    link-down   its link goes down: its packets go nowhere, its processes live on
                (a NIC, cable or switch port that fails); --for S: back up after S s
    link-up     the link back up
    slow-link   both directions limited to --rate (tc tbf)
    heal        the link up, no limit
    power-off   the machine dies: its link down, its slurmd, steps and tasks killed at once
    power-on    healed and its slurmd started again (Slurm takes it back in service)
    """
    from .. import sandbox as lib
    from ..errors import UsageError
    from ..sandbox import daemons, netns
    from ..sandbox.layout import Layout

    info = lib.status()
    if info is None:
        raise UsageError(f"sandbox fault: no sandbox runs in {lib.state_dir()}")
    if node not in info.nodes:
        raise UsageError(f"sandbox fault: no node {node!r} (the nodes: {' '.join(info.nodes)})")
    if not info.settings.network:
        raise UsageError("sandbox fault: the sandbox's nodes share this machine's loopback; faults through the "
                         "network need networked nodes: `slurmtrain sandbox down`, then `slurmtrain sandbox up "
                         "--network`")
    if seconds is not None and what != "link-down":
        raise UsageError("sandbox fault: --for goes with link-down")
    if what == "slow-link" and not _TC_RATE.fullmatch(rate):
        raise UsageError(f"sandbox fault: --rate {rate!r}: expected a rate as tc takes it, such as 10mbit, 500kbit "
                         "or 1gbit")
    layout = Layout(info.state_dir)
    if what == "power-on":
        netns.fault(layout, list(info.nodes), node, "heal")
        lib.revive(progress=lambda line: None)  # its slurmd again
        click.echo(f"sandbox: {node} is on: its link up, its slurmd started")
        return
    click.echo("sandbox: " + netns.fault(layout, list(info.nodes), node, what, rate, seconds))
    if what == "heal" and daemons.slurmd_name(node) not in info.pids:
        click.echo(f"sandbox: {node}'s slurmd is not running (powered off): `slurmtrain sandbox fault {node} "
                   "power-on` starts it")
    elif what == "heal" and info.node_states.get(node) not in daemons.READY_STATES:
        # Slurm marked it down while its link was: a node mended is taken back in service, as
        # power-on's is (its slurmd's next registration alone did not always, for minutes).
        daemons.resume_nodes(layout, [node])
        click.echo(f"sandbox: {node} was {info.node_states.get(node, 'not responding')} to Slurm: resumed")
