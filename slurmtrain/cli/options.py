"""Options shared by `gen` and `submit`, and the one function that turns them into a job."""

from __future__ import annotations

import difflib
import functools
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Callable, Sequence

import click

from .. import launchers
from ..errors import UsageError
from ..profile import LoadedProfile, load_profile
from ..render import JobSpec, default_job_name, short_time_limit, warnings




class _LauncherChoice(click.Choice):
    """click.Choice over the launchers' registry as it stands when the command runs."""

    choices = property(lambda self: launchers.names(), lambda self, value: None)

    def __init__(self) -> None:
        super().__init__(())

def job_options(f: Callable) -> Callable:
    """--profile, resource overrides, --set, --recipe and the command after `--`."""
    decorators = [
        click.option("--profile", "-p", "profile", default="local", show_default=True,
                     help="Cluster profile: a name (see `slurmtrain profiles list`) or a path to a .toml file."),
        click.option("--nodes", "-N", type=click.IntRange(min=1), help="Number of nodes (slurm.nodes)."),
        click.option("--gpus-per-node", "-G", type=click.IntRange(min=0), help="GPUs per node (slurm.gpus_per_node)."),
        click.option("--time", "-t", "time_limit", help="Time limit, e.g. 2:00:00 (slurm.time)."),
        click.option("--partition", help="Partition (slurm.partition)."),
        click.option("--launcher", type=_LauncherChoice(), help="Launcher (launch.launcher)."),
        click.option("--max-requeues", type=click.IntRange(min=0), help="Requeue limit (resilience.max_requeues)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override any profile key, e.g. --set fabric.nccl_debug=INFO (repeatable)."),
        click.option("--recipe", help="Run the built-in trainer with this recipe (name or path) when no command follows `--`."),
        click.option("--name", "job_name", help="Job name (default: the recipe or program name)."),
        click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2,...",
                     help="A sweep: one task of a job array per point, each in its own run directory. "
                          "With --recipe KEY is a recipe key (train.lr); with a command, any name, "
                          "used as {KEY} in the command and $SLURMTRAIN_SWEEP_<KEY>. Repeatable: the product."),
        click.option("--sweep-file", type=click.Path(dir_okay=False, path_type=Path),
                     help="The sweep's points: TOML [[point]] tables, or JSON Lines (one object a line)."),
        click.option("--max-parallel", type=click.IntRange(min=1),
                     help="With a sweep: at most this many points run at once (Slurm's %K)."),
        click.argument("command", nargs=-1, type=click.UNPROCESSED),
    ]
    return functools.reduce(lambda g, d: d(g), reversed(decorators), f)


def check_command(command: tuple[str, ...]) -> None:
    """What click lets through to the command but cannot be one. Unknown options are taken
    as the command's first words (so that a program's own options need no quoting): a
    mistyped option of ours (``--node 2 -- python train.py``) would be the program. And the
    job runs the command without a shell, so ``FOO=1 python train.py`` runs a program
    named ``FOO=1``."""
    if command[:1] == ("--",):
        raise UsageError("the command begins with a second `--`: one separates slurmtrain's options from it")
    if command and command[0].startswith("-") and command[0] != "-":
        ctx = click.get_current_context()
        name = command[0].split("=", 1)[0]
        known = _long_options(ctx.command)
        gen = ctx.parent.command.get_command(ctx.parent, "gen") if ctx.parent is not None else None
        close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        if gen is not None and ctx.command is not gen and name in _long_options(gen):
            hint = " (it is `slurmtrain gen`'s)"
        raise UsageError(f"no such option {name}{hint}; `slurmtrain {ctx.info_name} --help` lists them, and "
                         "the program's command goes after `--`")
    if command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
        key, value = command[0].split("=", 1)
        raise UsageError(f"the command begins with an environment assignment ({command[0]}); the job runs it "
                         f"without a shell: set it with --set 'env.vars.{key}={_toml_string(value)}' (or export it "
                         "in the profile's [env] vars)")


def _program_file(job: JobSpec) -> str | None:
    return next((w for w in job.command if w.endswith((".py", ".sh")) and not w.startswith("-")
                 and "{" not in w and "$" not in w), None)  # {KEY}: a sweep's word; $NAME: the node's


def job_path(loaded: LoadedProfile, name: str) -> tuple[Path | None, str]:
    """A file the command names, as the job will look for it: a relative one from where the
    job starts (the submit directory, or the profile's launch.workdir), and words saying
    where that is; (None, "") where this machine cannot tell (a container: the image may
    hold it; a workdir naming a variable only the job defines)."""
    from ..recipes.jobcheck import start_dir  # torch-free
    start, where = start_dir(loaded, Path.cwd())
    if start is None:
        return None, ""
    path = Path(name).expanduser()
    return (path if path.is_absolute() else start / path), ("" if path.is_absolute() else where)


def refuse_missing_program(loaded: LoadedProfile, job: JobSpec) -> None:
    """submit: a program file (or --deepspeed_config file) the job would not find, refused
    before its wait in the queue. Not judged where :func:`job_path` cannot tell, nor where
    this machine lacks the folder of an absolute path (a file system only the nodes mount)."""
    script = _program_file(job)
    for name in [*([script] if script else []), *_deepspeed_configs(job.command)]:
        path, where = job_path(loaded, name)
        if path is not None and not path.exists() and (where or path.parent.is_dir()):
            raise UsageError(f"{_no_such_file(name, path, where)}; nothing was submitted")


def _no_such_file(name: str, path: Path, where: str) -> str:
    return f"{name}: no such file" + (f" in {path.parent} ({where})" if where else "")


def _warn_of_no_heartbeat(loaded: LoadedProfile, script: Path, name: str) -> None:
    """A hang timeout set for a program that sends no heartbeat (it names nothing of
    slurmtrain): hangs after its start-up would go unseen, whatever the timeout."""
    if not loaded.profile.resilience.hang_timeout:
        return
    try:
        beats = b"slurmtrain" in script.read_bytes()
    except OSError:
        return
    if not beats:
        click.echo(f"slurmtrain: warning: resilience.hang_timeout = {loaded.profile.resilience.hang_timeout}: "
                   f"{name} sends no heartbeat (slurmtrain.stop.heartbeat(step) each step, or the Hugging Face "
                   "or Lightning callback), so a hang after its start-up is not seen (docs/survival.md)", err=True)


def _text(script: Path) -> str:
    try:
        return script.read_text(errors="replace")
    except OSError:
        return ""


def _warn_of_slurm_ranks(loaded: LoadedProfile, text: str, name: str) -> None:
    """A script that takes its rank from SLURM_PROCID (written for `srun python train.py`)
    under a launcher whose agent starts several processes a node: they share the node's
    task, so they take the same rank, and the job dies in its first collective."""
    from ..render import procs_per_node
    launcher = loaded.profile.launch.launcher
    if not launchers.get(launcher).agent or procs_per_node(loaded.profile) < 2 or "SLURM_PROCID" not in text:
        return
    if re.search(r"""["']RANK["']""", text):  # reads torchrun's too
        return
    srun = "--launcher srun (one Slurm task a process)" if "srun" in loaded.profile.allowed_launchers else \
        "a profile that allows the srun launcher"
    click.echo(f"slurmtrain: warning: {name} reads SLURM_PROCID, but the {launcher} launcher starts "
               f"{procs_per_node(loaded.profile)} processes a node in one Slurm task, which all see the same one: "
               f"if it takes its rank from it, use {srun}, or read RANK, LOCAL_RANK and WORLD_SIZE as {launcher} "
               "sets them", err=True)


def _warn_of_syntax_error(script: Path, name: str) -> None:
    """A Python script that does not compile fails at the job's start, after its wait in the
    queue. Warned, not refused: the nodes' Python (an image's) may be newer than this one."""
    if script.suffix != ".py":
        return
    import warnings
    try:
        source = script.read_bytes()  # bytes: its coding line is honoured
        with warnings.catch_warnings():  # "invalid escape sequence" and the like are not ours to say
            warnings.simplefilter("ignore")
            compile(source, str(script), "exec", dont_inherit=True)
    except SyntaxError as err:
        if err.lineno is None:  # null bytes, an unknown coding: not a script to judge
            return
        click.echo(f"slurmtrain: warning: {name} does not compile with this Python ({sys.version.split()[0]}): "
                   f"{type(err).__name__}: {err.msg} (line {err.lineno}); the job would fail as it starts, unless "
                   "the nodes' Python takes it", err=True)
    except (OSError, ValueError):  # unreadable, or null bytes (before 3.12): not a script to judge
        pass


def _note_no_stop_contract(loaded: LoadedProfile, suffix: str, text: str, name: str) -> None:
    """A program that names nothing of slurmtrain reports no checkpoint: stopped at a
    preemption or the time limit, its job is not requeued (requeue_when = "saved")."""
    if loaded.profile.resilience.requeue_when != "saved" or not loaded.profile.resilience.requeue:
        return
    # Only a Python program says what it uses (a shell script may start one that does); a
    # Lightning one may requeue its own job (its SLURM auto-requeue).
    if suffix != ".py" or not text or "slurmtrain" in text or "lightning" in text:
        return
    click.echo(f"slurmtrain: note: {name} does not use slurmtrain.stop, so it reports no checkpoint: after a "
               "preemption or the time limit its job is not requeued (resilience.requeue_when = \"saved\"). Have it "
               "save and exit 75 through slurmtrain.stop (docs/survival.md), or, if it resumes from its own "
               "checkpoints, set resilience.requeue_when = \"always\"", err=True)


def check_deepspeed_config(loaded: LoadedProfile, job: JobSpec) -> None:
    """gen and submit: the command's DeepSpeed config, as DeepSpeed would read it on every
    rank (slurmtrain/dsconfig.py); refused or warned of before the queue."""
    configs = _deepspeed_configs(job.command)
    if not configs:
        return
    from .. import dsconfig
    from ..render import procs_per_node

    split = dsconfig.data_parallel(job.command, loaded.profile.slurm.nodes * procs_per_node(loaded.profile))
    if split is None:
        return
    for name in configs:
        path, _ = job_path(loaded, name)
        for text in dsconfig.check(str(path) if path is not None else name, *split):
            click.echo(f"slurmtrain: warning: {text}", err=True)


def _deepspeed_configs(command: tuple[str, ...]) -> list[str]:
    """--deepspeed_config FILE, or the Hugging Face Trainer's --deepspeed FILE.json: read by
    every rank at its start (another config-like argument may name a file the program
    writes: only warned of). DeepSpeed's own --deepspeed is a flag: a value only when it
    names a .json file."""
    out = []
    for i, word in enumerate(command):
        key, eq, value = word.partition("=")
        if key in ("--deepspeed_config", "--deepspeed-config", "--deepspeed"):
            value = value if eq else (command[i + 1] if i + 1 < len(command) else "")
            if key == "--deepspeed" and not value.endswith(".json"):
                continue
            if value and "{" not in value and "$" not in value:
                out.append(value)
    return out


def warn_about_command(loaded: LoadedProfile, job: JobSpec, recipe_notes: Sequence[str] = ()) -> None:
    """Once the job passed its checks: what in the command, its recipe (``recipe_notes``,
    from the job's check), or the image it runs in, will not run as the user expects."""
    for note in recipe_notes:
        click.echo(f"slurmtrain: warning: {note}", err=True)
    _warn_of_missing_image(loaded)
    script = _program_file(job)
    for name in [*([script] if script else []), *_config_files(job.command)]:
        path, where = job_path(loaded, name)
        if path is not None and not path.exists():
            elsewhere = "" if where or path.parent.is_dir() else (
                f" here, nor its folder {path.parent}: a file system only the nodes mount? (not refused for that)")
            click.echo(f"slurmtrain: warning: {_no_such_file(name, path, where)}{elsewhere}", err=True)
    # Read for what it says (in a container too: the image's copy is usually this one).
    found = (job_path(loaded, script)[0] or Path(script).expanduser()) if script else None
    if found is not None and found.exists():
        _warn_of_lost_local_rank(loaded, job, found, script)
        _warn_of_no_heartbeat(loaded, found, script)
        text = _text(found)  # read once for what the two below look for
        _warn_of_slurm_ranks(loaded, text, script)
        _note_no_stop_contract(loaded, found.suffix, text, script)
        _warn_of_syntax_error(found, script)
    _note_launcher_options(loaded, job)
    _warn_of_missing_command(loaded, job)
    _note_own_options_after_dashes(loaded, job)
    shell = next((w for w in job.command[1:] if _SHELL_WORD.search(w)), None)
    if shell is not None:
        click.echo(f"slurmtrain: warning: {shell!r} in the command reaches the program as it is: the job runs the "
                   "command without a shell, so no variable in it is expanded (write the value, or read the "
                   "variable in the program)", err=True)


# slurmtrain's options that no training program is likely to have: after `--` they went to
# the program, and the job used the defaults (`-- python train.py --profile aws-p4d`).
_OWN_OPTIONS = ("--profile", "--launcher", "--runs-dir")
# ... and those a program may have too, but that after a command without `--` (`gen python
# train.py --nodes 1`) were as likely meant for slurmtrain: said only where the job's own
# value differs from the one the program gets.
_JOB_OPTIONS = ("--nodes", "--time", "--partition")


def _note_own_options_after_dashes(loaded: LoadedProfile, job: JobSpec) -> None:
    word = next((w for w in job.command[1:] if w.split("=", 1)[0] in _OWN_OPTIONS), None)
    if word is not None:
        click.echo(f"slurmtrain: note: {word.split('=', 1)[0]} after `--` goes to the program, not to slurmtrain "
                   f"(the job uses profile {loaded.name}, launcher {loaded.profile.launch.launcher}): slurmtrain's "
                   "options go before `--`", err=True)
        return
    words = list(job.command[1:])
    for i, w in enumerate(words):
        key, eq, value = w.partition("=")
        value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
        slurm = loaded.profile.slurm
        job_value = {"--nodes": str(slurm.nodes), "--time": slurm.time, "--partition": slurm.partition}.get(key, "")
        if key in _JOB_OPTIONS and value and not value.startswith("-") and not _same(key, value, job_value):
            click.echo(f"slurmtrain: note: {key} {value} after the program's name goes to the program; the job "
                       f"itself asks Slurm for {key.removeprefix('--')} {job_value or '(the default)'} (if you meant "
                       "the job's: slurmtrain's options go before the command, or before `--`)", err=True)
            return


def _same(key: str, a: str, b: str | None) -> bool:
    """Two values of a job option that mean the same: node counts as numbers ("02", "2"),
    sbatch's time limits as durations ("30" minutes, "00:30:00"); unreadable ones: not."""
    from ..slurmtext import parse_duration

    def seconds(t: str | None) -> int | None:
        try:
            if t and t.isdigit():
                return int(t) * 60
            if t and "-" in t and ":" not in t:  # days-hours
                days, hours = t.split("-", 1)
                return (int(days) * 24 + int(hours or 0)) * 3600
            return parse_duration(t)
        except ValueError:
            return None
    if a == b:
        return True
    if key == "--nodes":
        return a.isdigit() and b is not None and b.isdigit() and int(a) == int(b)
    return key == "--time" and seconds(a) is not None and seconds(a) == seconds(b)


def _warn_of_missing_command(loaded: LoadedProfile, job: JobSpec) -> None:
    """The command's first word (python, torchrun...) not on this shell's PATH, which the
    job gets (sbatch passes this environment): every node would fail with "not found", after
    the queue. Not judged where setup lines or a container may provide it."""
    p = loaded.profile
    if not job.command or p.launch.setup or p.container.runtime != "none":
        return
    import shutil
    first = job.command[0]
    if first.endswith(".py") and Path(first).is_file():
        from .. import launchers
        runs_itself = os.access(first, os.X_OK) and _text(Path(first)).startswith("#!")  # srun runs it as it is
        if not launchers.get(p.launch.launcher).agent and not runs_itself:  # an agent runs it with Python
            click.echo(f"slurmtrain: warning: {first} is a Python script, not a command the {p.launch.launcher} "
                       f"launcher can run: write `python {first}`", err=True)
        return
    if "/" not in first and shutil.which(first) is None:
        click.echo(f"slurmtrain: warning: {first}: not on this shell's PATH, which the job gets: activate the "
                   "environment before submitting, give its full path, or add a setup line (launch.setup) that "
                   "provides it", err=True)


_SHELL_WORD = re.compile(r"\$(\{?[A-Za-z_][A-Za-z0-9_]*\}?)")  # $NAME, ${NAME}: a shell's, which the job has not


def _note_launcher_options(loaded: LoadedProfile, job: JobSpec) -> None:
    """A launcher written in the command is taken over: the options the job script sets
    itself are left out, and said so (not silently); and which launcher runs it, where
    the command named another."""
    from .. import command
    try:
        prog = command.parse(job.command)
    except UsageError:
        return
    chosen, named = loaded.profile.launch.launcher, prog.launcher_in_command
    for name in dict.fromkeys(n for n in (named, chosen) if n in launchers.names()):
        found = [folder / f for f in launchers.get(name).runner_files for folder in (Path.cwd(), Path.home())
                 if (folder / f).is_file()]
        if found:
            click.echo(f"slurmtrain: warning: {found[0]}: read by {name}'s own multi-node runner only, which the "
                       "job does not use: put its variables in the profile's [env] vars", err=True)
    if named in launchers.names() and named != chosen:
        click.echo(f"slurmtrain: note: `{named}` in the command runs under the launcher {chosen} "
                   f"(launch.launcher): the same ranks, each told its LOCAL_RANK in the environment; "
                   f"--launcher {named} runs {named}'s own launcher on every node", err=True)
    if prog.dropped:
        port = next((w.replace("=", " ").split()[-1] for w in prog.dropped
                     if w.lstrip("-").replace("-", "_").startswith("master_port")), None)
        keep = f"; to keep port {port}: --set launch.rdzv_port={port}" if port and port.isdigit() else ""
        click.echo(f"slurmtrain: note: {prog.launcher_in_command}'s {', '.join(prog.dropped)} in the command "
                   "left out: the job script starts the launcher on every node with its own rendezvous and "
                   f"restarts (the profile's [launch] and [resilience]){keep}", err=True)


def _config_files(command: tuple[str, ...]) -> list[str]:
    """The command's arguments that name a configuration file (--deepspeed_config ds.json,
    --config=train.yaml): a wrong one fails every rank after the wait in the queue."""
    values = [w.split("=", 1)[1] if w.startswith("-") and "=" in w else w for w in command[1:]]
    return [v for v in values if v.endswith((".json", ".yaml", ".yml", ".toml")) and not v.startswith("-")
            and "{" not in v and "$" not in v]


def _warn_of_missing_image(loaded: LoadedProfile) -> None:
    """An apptainer image (or a pyxis squashfs file) given as a file that is not here: the
    nodes usually see the same shared file system as the login node. A URI (docker://,
    oras://...), a registry name or $NAME: not judged. A key the runtime ignores: said."""
    c = loaded.profile.container
    if c.runtime == "pyxis" and c.home:
        click.echo(f"slurmtrain: warning: container.home {c.home}: an apptainer/singularity key; pyxis runs with "
                   "the job's own home (left out of the script)", err=True)
    # pyxis takes a registry name (nvcr.io#nvidia/pytorch:24.05-py3) or a squashfs file
    as_file = c.image.endswith(".sqsh") or c.image.startswith(("/", "./", "~")) if c.runtime == "pyxis" else True
    if c.runtime not in ("apptainer", "singularity", "pyxis") or not c.image or "://" in c.image or "$" in c.image \
            or not as_file:
        return
    image = Path(c.image).expanduser()
    where = "" if image.is_absolute() else f" (a relative path: from {Path.cwd()}, where the job starts)"
    if not image.exists():
        click.echo(f"slurmtrain: warning: container.image {c.image}: no such file on this machine{where}", err=True)
    elif not os.access(image, os.R_OK):
        from .. import perms
        click.echo(f"slurmtrain: warning: container.image {c.image}: not readable by you ({perms.explain(image)}): "
                   f"{c.runtime} refuses it on every node", err=True)
    if c.runtime in ("apptainer", "singularity"):
        _warn_of_missing_binds(c.binds, c.runtime)


def _warn_of_missing_binds(binds: tuple[str, ...], runtime: str) -> None:
    """A bind's source (``SRC[:DEST[:OPTS]]``) that is not here: the runtime refuses the
    launch on every node ("mount source ... doesn't exist"), after the wait in the queue."""
    sources = [b.split(":", 1)[0] for b in binds]
    missing = [s for s in sources if s and "$" not in s and not Path(s).expanduser().exists()]
    if missing:
        click.echo(f"slurmtrain: warning: container.binds: no such file or folder on this machine: "
                   f"{', '.join(missing)}; {runtime} refuses a missing bind source on every node", err=True)


_LOCAL_RANK = re.compile(r"""["']--local[_-]rank["']""")


def _warn_of_lost_local_rank(loaded: LoadedProfile, job: JobSpec, path: Path, name: str) -> None:
    """`deepspeed train.py` (or torch.distributed.launch) appends --local_rank=N; another
    launcher taking the command over passes LOCAL_RANK in the environment only, and a
    script whose parser requires the option stops at once, after its wait in the queue."""
    from .. import command
    prog, launcher = command.parse(job.command), loaded.profile.launch.launcher
    if not prog.local_rank_option or launchers.get(launcher).local_rank_option:
        return
    try:
        if not _LOCAL_RANK.search(path.read_text(errors="replace")):
            return
    except OSError:
        return
    env = 'read int(os.environ["LOCAL_RANK"]) in the script'
    passing = [name for name in loaded.profile.allowed_launchers if launchers.get(name).local_rank_option]
    how = (f"use --launcher {passing[0]}, or {env}" if passing
           else f"{env} (no launcher this profile allows passes the option)")
    click.echo(f"slurmtrain: warning: {name} parses --local_rank, which `{prog.launcher_in_command}` passes "
               f"and the profile's launcher {launcher} does not (it sets LOCAL_RANK in the environment): {how}",
               err=True)


def _long_options(command: click.Command) -> list[str]:
    return [o for p in command.params for o in getattr(p, "opts", []) if o.startswith("--")]


def _toml_string(value: str) -> str:
    return f'"{_toml_escape(value)}"'


def overrides(nodes, gpus_per_node, time_limit, partition, launcher, max_requeues,
              sets) -> list[str | tuple[str, str]]:
    """Flags become --set assignments so one mechanism applies them; each keeps the flag
    as its provenance (an error names ``--time 1h``, not a --set the user never typed)."""
    out: list[str | tuple[str, str]] = list(sets)
    for flag, key, value in (("--nodes", "slurm.nodes", nodes),
                             ("--gpus-per-node", "slurm.gpus_per_node", gpus_per_node),
                             ("--time", "slurm.time", time_limit), ("--partition", "slurm.partition", partition),
                             ("--launcher", "launch.launcher", launcher),
                             ("--max-requeues", "resilience.max_requeues", max_requeues)):
        if value is not None:
            assignment = f"{key}={value}" if isinstance(value, int) else f'{key}="{_toml_escape(value)}"'
            out.append((assignment, f"{flag} {value}"))
    return out


def _toml_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _sweep_points(sweeps: tuple[str, ...], sweep_file: Path | None, command: tuple[str, ...]) -> list:
    """The sweep's points, checked against the command's {key} words; [] without a sweep,
    for which slurmtrain.sweep is not even imported (a `{...}` word is then just a word)."""
    if not sweeps and sweep_file is None:
        return []
    from .. import sweep

    points = sweep.points_of(sweeps, sweep_file)
    sweep.check_placeholders(command, points)
    return points


def _recipe_sets(sets) -> tuple[str, ...]:
    """With --recipe, a --set of one of the recipe's sections is the trainer's (`--set
    train.steps=20`), any other the profile's."""
    import dataclasses

    from ..recipes.recipe import Recipe
    sections = {f.name for f in dataclasses.fields(Recipe)} - {"description"}
    return tuple(kv for kv in sets if isinstance(kv, str) and kv.split("=", 1)[0].split(".", 1)[0].strip() in sections)


def build_job(argv_name: str, *, profile: str, nodes, gpus_per_node, time_limit, partition, launcher,
              max_requeues, sets, recipe, job_name, command, sweeps=(), sweep_file=None, max_parallel=None,
              run_dir: str | None = None, regen_args: list[str] | None = None,
              submitting: bool = False) -> tuple[LoadedProfile, JobSpec]:
    """The profile and job the options say, their warnings said; ``submitting``: what submit
    refuses and gen only warns of is refused here, before it is said a second time as a warning."""
    check_command(tuple(command))
    recipe_sets = _recipe_sets(sets) if recipe and not command else ()
    misplaced = () if recipe_sets else _recipe_sets(sets)
    if misplaced:  # else the profile's "unknown key", which misleads
        kv = misplaced[0]
        raise UsageError(f"--set {kv}: {kv.split('.', 1)[0]}.* is a key of the built-in trainer's recipe: it "
                         f"applies with --recipe (and no command), not to {'your command' if command else 'a profile'}"
                         + ("; your program takes its own options after --" if command else ""))
    sets = tuple(kv for kv in sets if kv not in recipe_sets)
    loaded = load_profile(profile, overrides(nodes, gpus_per_node, time_limit, partition, launcher,
                                             max_requeues, sets))
    short = short_time_limit(loaded, starts=True) if submitting else None
    if short:  # each start would save at once and requeue: refused, not queued to loop
        raise UsageError(f"{short}; nothing was submitted")
    points = _sweep_points(tuple(sweeps), sweep_file, tuple(command))
    if max_parallel is not None and not points:
        raise UsageError("--max-parallel is for a sweep (--sweep or --sweep-file)")
    job = JobSpec(command=tuple(command), recipe=recipe, recipe_sets=recipe_sets, run_dir=run_dir,
                  regen_command=shlex.join(["slurmtrain", argv_name] + (regen_args or [])),
                  sweep=tuple(points), array=len(points) or None, max_parallel=max_parallel)
    job = JobSpec(**{**job.__dict__, "job_name": job_name or default_job_name(job)})
    said = warnings(loaded)
    if points:
        from .. import sweep
        said += sweep.warnings(tuple(command), points, recipe_sets or tuple(sets))
    for text in said:
        click.echo(f"slurmtrain: warning: {text}", err=True)
    return loaded, job
