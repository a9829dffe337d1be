"""`slurmtrain doctor` (check the nodes before a run) and `slurmtrain nodes` (the
bad-node ledger). Light to import: torch runs only on the nodes, in the doctor job."""

from __future__ import annotations

import os
import time

import click

from .base import main
from .options import _LauncherChoice, overrides
from .refs import runs_dir_option


def _check_help() -> str:
    from ..doctor.checks import CHECKS
    return "Comma-separated checks (default: all): " + "; ".join(f"{k}: {v}" for k, v in CHECKS.items())


@main.command()
@click.option("--profile", "-p", default="local", show_default=True, help="Cluster profile: a name or a .toml path.")
@click.option("--nodes", "-N", type=click.IntRange(min=1), help="Number of nodes to check (slurm.nodes).")
@click.option("--partition", help="Partition (slurm.partition).")
@click.option("--launcher", type=_LauncherChoice(), help="Launcher whose needs the nodes must meet (launch.launcher).")
@click.option("--time", "-t", "time_limit", help="Time limit of the doctor job (default 00:10:00).")
@click.option("--checks", "checks", metavar="a,b", help=_check_help())
@click.option("--check-timeout", type=click.FloatRange(min=1), default=60, show_default=True,
              help="Seconds each check may take on a node.")
@click.option("--seconds", type=click.FloatRange(min=0.1), default=2, show_default=True,
              help="Length of each measurement (matmul, all-reduce).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override any profile key (repeatable).")
@runs_dir_option
def doctor(profile, nodes, partition, launcher, time_limit, checks, check_timeout, seconds, sets, runs_dir) -> None:
    """Check every node before a run: environment, devices, network, Slurm.

    Submits a short job rendered like a training job from the profile (container,
    environment, setup lines, launcher), or, started inside an allocation (SLURM_JOB_ID
    set), runs it on that allocation's nodes. Prints one row per node and check with its
    figure and pass/warn/fail, writes <run>/doctor.json, records failing nodes in the
    bad-node ledger (`slurmtrain nodes`) and exits 1 naming them.

    \b
      slurmtrain doctor -p aws-p4d -N 4
      slurmtrain doctor -p local --checks versions,allreduce
    """
    from ..doctor import checks as checks_mod
    from ..doctor import report, run
    from ..profile import load_profile

    chosen = checks_mod.parse(checks)
    sets = list(run.OVERRIDES) + ([] if time_limit else [f'slurm.time="{run.DEFAULT_TIME}"']) + list(sets)
    loaded = load_profile(profile, overrides(nodes, None, time_limit, partition, launcher, None, sets))
    run.require(loaded, chosen, explicit=checks is not None)
    out = run.doctor(loaded, chosen, runs_dir, check_timeout=check_timeout, seconds=seconds,
                     say=lambda s: click.echo(s, err=True))
    click.echo(report.table(out.rows), nl=False)
    click.echo(f"results: {out.run_dir / 'doctor.json'}")
    click.echo(report.summary(out.rows))
    _note_ledger(out.rows, runs_dir, loaded.profile.resilience.bad_node_hours)
    if out.failed:
        raise SystemExit(1)


def _note_ledger(rows, runs_dir: str, hours: float) -> None:
    """Nodes that passed every check here but that the bad-node ledger keeps out of new jobs
    (a hang or a failure it blamed on them): said, with how to clear them."""
    from .. import ledger
    from ..doctor.report import FAIL
    failed = {r.node for r in rows if r.verdict == FAIL}
    passed = sorted({r.node for r in rows} - failed)
    excluded = set(ledger.excluded(runs_dir, hours))  # the ledger read once
    kept_out = [n for n in passed if n in excluded]
    if kept_out:
        them = "them" if len(kept_out) > 1 else "it"
        click.echo(f"note: {' '.join(kept_out)} passed every check, but the bad-node ledger keeps {them} out of "
                   f"new jobs (`slurmtrain nodes` says why); `slurmtrain nodes forget {' '.join(kept_out)}` clears "
                   f"{them}")


@main.group(invoke_without_command=True)
@runs_dir_option
@click.pass_context
def nodes(ctx, runs_dir) -> None:
    """List the bad-node ledger (<runs-dir>/bad-nodes.jsonl), and the site's.

    Nodes are recorded by `doctor` failures, by the start-up watchdog naming a node
    and by the in-job gate (resilience.preflight); `submit` and `resubmit` exclude the
    ones recorded less than resilience.bad_node_hours ago. A site's own ledger, named by
    $SLURMTRAIN_SITE_LEDGER, is read too (its lines are marked "site"), never written.
    """
    ctx.ensure_object(dict)
    ctx.obj["runs_dir"] = runs_dir
    if ctx.invoked_subcommand is not None:
        return
    from .. import ledger
    site = ledger.site_path()
    rows = [(e, "") for e in ledger.read(runs_dir)] + [(e, "site") for e in ledger.read_site()]
    if not rows:
        click.echo(f"no bad nodes recorded in {ledger.path(runs_dir)}" + (f" or in {site}" if site else ""))
    for e, where in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
        click.echo(f"{e.node}\t{when}\t{e.source}\t{e.run or '-'}\t{e.reason}" + (f"\t{where}" if where else ""))
    if site and not os.access(site, os.R_OK):
        click.echo(f"site ledger {site} ({ledger.SITE_VAR}) cannot be read: its nodes are not excluded", err=True)


@nodes.command()
@click.argument("node_names", metavar="NODE", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Forget every node.")
@click.pass_context
def forget(ctx, node_names, everything) -> None:
    """Remove NODE (or --all) from the bad-node ledger."""
    from .. import ledger
    from ..errors import UsageError
    if bool(node_names) == everything:
        raise UsageError("nodes forget: give node names or --all (not both)")
    site_nodes = {e.node for e in ledger.read_site()}
    known = {e.node for e in ledger.read(ctx.obj["runs_dir"])} | site_nodes
    unknown = sorted(set(node_names) - known)
    if unknown:  # a typo forgets nothing: say so, and what is there
        listed = " ".join(sorted(known)) or "none"
        raise UsageError(f"nodes forget: {' '.join(unknown)} not in the bad-node ledger under {ctx.obj['runs_dir']} "
                         f"(its nodes: {listed})")
    n = ledger.forget(ctx.obj["runs_dir"], None if everything else list(node_names))
    click.echo(f"forgot {n} entr{'y' if n == 1 else 'ies'}")
    kept = sorted(site_nodes if everything else site_nodes & set(node_names))
    if kept:
        click.echo(f"still in the site's ledger {ledger.site_path()} (read-only; its admins keep it): {' '.join(kept)}")
