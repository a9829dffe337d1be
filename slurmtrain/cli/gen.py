"""Commands: gen, profiles list, profiles show, profiles keys."""

from __future__ import annotations

import dataclasses
import sys

import click

from ..errors import SlurmtrainError
from ..profile import available, load_profile
from ..render import render
from .base import main
from .options import build_job, check_deepspeed_config, job_options, warn_about_command


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--plain", is_flag=True,
              help="No supervisor: the task and one srun, for sites where slurmtrain cannot run on the job's first "
                   "node. Gives up the requeue after a stop, the start-up watchdog and the run's events.")
@job_options
def gen(plain: bool, **opts) -> None:
    """Print a complete, standalone sbatch script for COMMAND on a cluster profile.

    \b
      slurmtrain gen --profile aws-p4d --nodes 4 -- python train.py --lr 3e-4 > job.sbatch
      slurmtrain gen --profile local --recipe tiny-demo
      slurmtrain gen --plain --profile aws-p4d -- python train.py   # unsupervised
    """
    from ..recipes.jobcheck import check_job  # torch-free

    loaded, job = build_job("gen", regen_args=sys.argv[2:], **opts)
    job = dataclasses.replace(job, plain=plain)
    recipe_notes = check_job(loaded, job)
    check_deepspeed_config(loaded, job)
    script = render(loaded, job)
    warn_about_command(loaded, job, recipe_notes)
    _warn_of_ledger(loaded)
    click.echo(script, nl=False)


def _warn_of_ledger(loaded) -> None:
    """`submit` leaves out the bad-node ledger's nodes (sbatch --exclude); a script from
    `gen`, submitted by hand, would not: say which, and how."""
    import os

    from .. import ledger
    runs_dir = os.environ.get("SLURMTRAIN_RUNS_DIR") or "runs"
    try:
        nodes = ledger.excluded(runs_dir, loaded.profile.resilience.bad_node_hours)
    except OSError:
        return  # an unreadable ledger is `submit`'s to report
    if nodes:
        them = ",".join(nodes)
        click.echo(f"slurmtrain: warning: the bad-node ledger ({ledger.path(runs_dir)}"
                   f"{', and the site ledger' if ledger.read_site() else ''}) lists {them}: `slurmtrain submit` "
                   f"leaves them out, this script does not (submit it with `sbatch --exclude={them}`, or see "
                   "`slurmtrain nodes`)", err=True)


@main.group()
def profiles() -> None:
    """List and inspect cluster profiles."""


@profiles.command("list")
def profiles_list() -> None:
    """Profiles found, in look-up order (./.slurmtrain/clusters, ~/.config/slurmtrain/clusters, built-ins)."""
    from ..profile import search_dirs

    dirs = [d.resolve() for d in search_dirs()]
    found = sorted(available().items(), key=lambda item: (
        dirs.index(item[1].parent.resolve()) if item[1].parent.resolve() in dirs else len(dirs), item[0]))
    width = max((len(n) for n, _ in found), default=4)
    for name, path in found:
        try:
            desc = load_profile(str(path)).profile.description
        except SlurmtrainError as err:  # a broken user profile must not hide the others
            desc = f"(invalid: {err})"
        click.echo(f"{name:<{width}}  {desc}  [{path}]")


@profiles.command("show")
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a key, as in gen.")
def profiles_show(name: str, sets: tuple[str, ...]) -> None:
    """Print profile NAME after `extends` and --set, as TOML (unset keys left out: see `profiles keys`)."""
    click.echo(load_profile(name, sets).to_toml(), nl=False)


@profiles.command("keys")
@click.argument("section", required=False)
def profiles_keys(section: str | None) -> None:
    """Every key a profile may set: its default and what it means (SECTION: only those of
    one section, such as fabric)."""
    from ..errors import UsageError
    from ..profile import Profile
    from ..schema import docs, toml_value
    rows = docs(Profile)
    if section:
        rows = [r for r in rows if r[0].startswith(section.strip(".") + ".") or r[0] == section]
        if not rows:
            sections = sorted({k.split(".")[0] for k, _, _ in docs(Profile) if "." in k})
            raise UsageError(f"no profile section or key {section!r}; sections: {', '.join(sections)}")
    for key, doc, default in rows:
        shown = "unset" if default is None else toml_value(default)
        click.echo(f"{key} = {shown}\n    {doc}")
