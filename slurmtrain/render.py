"""Render a job script from a profile: pure, no side effects.

``render(profile, job) -> str``. The small functions here decide every value; the
Jinja2 templates in ``templates/`` say what the script looks like. Values from a
profile or the command line are shell-quoted (the ``q`` filter, or :func:`shell_words`).
"""

from __future__ import annotations

import os
import re
import signal
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

from . import __version__, command, resources, sbatchextra, tracking
from .command import Program
from .errors import UsageError
from .exits import EXIT_STOPPED
from . import launchers
from . import shellwords
from .shellwords import Raw, expanding, inside_double_quotes, shell_form, shell_words
from .profile import LoadedProfile, Profile, limit_seconds
from .schema import Frozen


@dataclass(frozen=True, repr=False, eq=False)  # repr, == and hash: schema.Frozen's, not compiled at import
class JobSpec(Frozen):
    """What to run, independent of the cluster."""

    command: tuple[str, ...] = ()     # the training command given after `--`
    recipe: str | None = None          # built-in trainer recipe, used when command is empty
    job_name: str = "slurmtrain"
    run_dir: str | None = None         # absolute; None: the script picks runs/<name>-<jobid>
    regen_command: str = ""            # shown in the script's header comment
    exclude: tuple[str, ...] = ()      # nodes sbatch must not give the job (the bad-node ledger's)
    array: int | None = None           # a job array of this many tasks (0..N-1), each its own allocation
    plain: bool = False                # no supervisor: the task and one srun (gen --plain)
    python: str = ""                   # the interpreter that ran gen/submit (default supervisor; "": sys.executable)
    sweep: tuple = ()                  # sweep.Point each: an array of one task per point (sweep.py)
    recipe_sets: tuple[str, ...] = ()  # --set KEY=VALUE of the recipe's (model., train., ...), with --recipe
    max_parallel: int | None = None    # an array's tasks running at once (%K)


# Values that end up on an #SBATCH line, which sbatch (not bash) reads: no quoting
# exists there, so anything that would need it is refused.
# What an #SBATCH line takes unquoted: letters (any script's: sbatch passes UTF-8 through),
# digits and the punctuation of paths and options; no spaces, quotes, $ or #.
_SBATCH_SAFE = re.compile(r"[\w./%+:@,=\-\[\]&|]+")
_JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def check_job_name(name: str) -> None:
    """A job name is also its run directory's name: checked before anything is made."""
    if not _JOB_NAME.fullmatch(name):
        raise UsageError(f"job name {name!r}: use 1-128 ASCII letters (a-z, A-Z), digits, '_', '.' or '-'")


def _sbatch_directives(p: Profile, job: JobSpec, where: str) -> list[str]:
    s, r = p.slurm, p.resilience
    check_job_name(job.job_name)
    # One task per node runs a launcher there; without an agent every process is a task.
    tasks = launchers.get(p.launch.launcher).tasks_per_node(procs_per_node(p))
    cpus = s.cpus_per_task if s.cpus_per_task is None else max(1, s.cpus_per_task // tasks)
    out = [f"--job-name={job.job_name}"]
    if job.array is not None:
        out.append(f"--array=0-{job.array - 1}" + (f"%{job.max_parallel}" if job.max_parallel else ""))
    out += [f"--nodes={s.nodes + s.spare_nodes}", f"--ntasks-per-node={tasks}"]
    if s.spare_nodes:
        out.append("--no-kill")  # a node that dies must not end the job: a spare takes its place
    if s.gpus_per_node:
        out.append(f"--gres=gpu:{s.gpu_type + ':' if s.gpu_type else ''}{s.gpus_per_node}")
    for flag, value in (("cpus-per-task", cpus), ("mem", s.mem), ("time", s.time),
                        ("partition", s.partition), ("account", s.account), ("qos", s.qos),
                        ("constraint", s.constraint)):
        if value is not None:
            out.append(f"--{flag}={value}")
    if s.exclusive:
        out.append("--exclusive")
    sbatchextra.check(s.extra, {sbatchextra.name_of(d) for d in out}, where)
    # An array task's log is named by the array and the task (%A_%a), which is how its
    # events and `slurmtrain logs` name it too.
    tag = "%A_%a" if job.array is not None else "%j"
    if job.run_dir:
        log = f"{job.run_dir}/logs/job-{tag}.out"
        # sbatch reads a double-quoted value whole (a project under "my proj"): quoted only then
        out.append(f'--output="{log}"' if " " in log and _SBATCH_SAFE.fullmatch(log.replace(" ", "_")) else
                   f"--output={log}")
    else:
        out.append(f"--output=slurm-%x-{tag}.out")
    exclude = list(dict.fromkeys([*job.exclude, *sbatchextra.excluded(s.extra)]))  # sbatch takes one --exclude
    if exclude:
        out.append("--exclude=" + ",".join(exclude))
    out.append("--open-mode=append")
    out.append("--requeue" if r.requeue else "--no-requeue")
    # To the batch script, where the supervisor takes it; a plain script has none (a shell dies
    # of an untrapped USR2): there Slurm signals the job's steps, the program's processes.
    out.append(f"--signal={'' if job.plain else 'B:'}{_signal_name(r.signal)}@{r.signal_seconds}")
    out.extend(sbatchextra.without_exclude(s.extra))
    for d in out:
        value = d.split("=", 1)[-1]
        if value.startswith('"') and value.endswith('"') and len(value) > 1:  # quoted above: its spaces
            value = value[1:-1].replace(" ", "_")
        if not _SBATCH_SAFE.fullmatch(value) or "\n" in d:
            bad = "".join(dict.fromkeys(c for c in value if not _SBATCH_SAFE.fullmatch(c)))
            raise UsageError(f"#SBATCH {d}: sbatch cannot read {bad!r} on an #SBATCH line (it takes letters, "
                             "digits and ./%+:@,=-[]&|); choose a simpler name or path")
    return out


def _check_array(p: Profile, job: JobSpec) -> None:
    """A job array runs the same script as N tasks that share one run directory: right for
    work split by task (``tokenize --part slurm``), wrong for the built-in trainer, whose
    tasks would all write the same checkpoints."""
    if job.array is None:
        return
    if job.array < 1:
        raise UsageError(f"a job array of {job.array} tasks: give at least 1")
    if job.recipe and not job.command and not job.sweep:
        raise UsageError("a job array runs the command once per task, all in one run directory: the built-in "
                         "trainer's tasks would overwrite each other's checkpoints; submit one job instead")
    if job.sweep and len(job.sweep) != job.array:
        raise UsageError(f"a sweep of {len(job.sweep)} points in an array of {job.array} tasks")


def _check_setup(lines: tuple[str, ...], where: str) -> None:
    """Each setup line is a shell group of its own in the script (task.j2): one that is no
    complete command (an unbalanced quote) made the whole script a syntax error, which
    Slurm ran and failed at once, its cause only in the batch log. ``bash -n`` reads
    without running; no bash here: not judged."""
    for number, line in enumerate(lines, 1):
        try:
            proc = subprocess.run(["bash", "-n"], input=f"{{ {line}\n}}\n", capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return
        if proc.returncode != 0:
            why = re.sub(r"^bash: (line \d+: )?", "", (proc.stderr.strip().splitlines() or ["?"])[0])
            raise UsageError(f"launch.setup line {number} ({where}): {line!r} is not a whole shell command "
                             f"({why}): the job script would fail on it before any node started")


def _sweep_cases(job: JobSpec) -> list[tuple[int, str]]:
    """(task, shell assignments) of each point: its run directory under the sweep's, its
    values as variables, and for the built-in trainer its ``--set`` lines."""
    if not job.sweep:
        return []
    from . import sweep as sweep_mod  # here: a job without a sweep does not import it

    out = []
    for i, point in enumerate(job.sweep):
        words = [f'RUN_DIR="$RUN_DIR"/points/{shlex.quote(point.label)}']
        exports = [f"{sweep_mod.env_name(k)}={shlex.quote(v)}" for k, v in point.values]
        if not job.command:
            exports.append(f"SLURMTRAIN_SWEEP_SETS={shlex.quote(sweep_mod.sets_text(point))}")
        out.append((i, "; ".join(words + ["export " + " ".join(exports)])))
    return out


def _job_tag(job: JobSpec) -> str:
    """How the script names its own job in file names: the job id, or for an array task
    ``<array job id>_<task>`` (sbatch's %A_%a), so that tasks' logs never collide."""
    return "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" if job.array is not None else "$SLURM_JOB_ID"


def _signal_name(sig: str) -> str:
    return sig[3:] if sig.startswith("SIG") else sig


def _fabric_env(p: Profile) -> dict[str, str]:
    """Environment each fabric needs; the profile's own [fabric].env comes last and wins."""
    f = p.fabric
    env: dict[str, str] = {}
    if f.kind == "efa":
        env["FI_PROVIDER"] = "efa"
        if f.gpu_rdma:  # GPU-direct RDMA exists on p4d/p5, not on g5/g4dn
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
            env["FI_EFA_FORK_SAFE"] = "1"
        # No NCCL_PROTO=simple: only the aws-ofi-nccl plugin 1.5 and older needed it, and it
        # turns off NCCL's low-latency protocols; such a site adds it to fabric.env.
    elif f.kind == "socket":
        env["NCCL_IB_DISABLE"] = "1"
    if f.socket_ifname:  # gloo's own: each node's task picks its interface (templates/task.j2)
        env["NCCL_SOCKET_IFNAME"] = f.socket_ifname
    if f.nccl_debug and p.slurm.gpus_per_node:
        env["NCCL_DEBUG"] = f.nccl_debug
    env.update(f.env)
    return env


def _env_exports(p: Profile) -> list[tuple[str, str]]:
    # A program's print() reaches its node log, a file, in 8 KiB blocks: `logs -f` and the
    # batch log's last lines would lag by minutes. The profile's [env] vars may say "".
    env = {"PYTHONUNBUFFERED": "1", **_fabric_env(p)}
    if p.resilience.checkpoint_every == "auto":  # read by the built-in trainer (train/cadence.py)
        env.update({"SLURMTRAIN_CHECKPOINT_EVERY": "auto", "SLURMTRAIN_NODE_MTBF_HOURS": f"{p.resilience.node_mtbf_hours:g}"})
    env.update(p.env.vars)
    if p.container.runtime in ("none", "pyxis"):
        env.update(p.container.env)  # pyxis passes the job's environment into the container
    return sorted(env.items())


def procs_per_node(p: Profile) -> int:
    return p.launch.procs_per_node or p.slurm.gpus_per_node or 1


def _binds_run_dir(binds: tuple[str, ...], job: JobSpec) -> bool:
    """Whether the container needs the run directory bound: the task writes its arrival
    mark, logs and events there and reads the stop file. Skipped only where a bind at the
    same path inside already covers a run directory known now."""
    if not job.run_dir:
        return True
    for b in binds:
        src, _, rest = b.partition(":")
        dst = rest.split(":")[0] or src
        if src == dst and (job.run_dir == src or job.run_dir.startswith(src.rstrip("/") + "/")):
            return False
    return True


def _image_file(p: Profile) -> str:
    """An apptainer image the nodes open as a file (not a URI, no variable): each node checks
    it is there after its setup lines, so a missing one is that node's setup failure, named,
    not a launch that dies in the container runtime."""
    c = p.container
    if c.runtime not in ("apptainer", "singularity") or "://" in c.image or "$" in c.image:
        return ""
    return c.image


def _container_prefix(p: Profile, job: JobSpec) -> list[str]:
    c = p.container
    if c.runtime not in ("apptainer", "singularity"):
        return []
    # container.env as APPTAINERENV_K=V (SINGULARITYENV_ for singularity) in the runtime's
    # environment: its --env takes a comma-separated list, and split a value with a comma
    # (one that then named no variable dropped every one of them, silently).
    words: list[str] = ["env", *(expanding(f"{c.runtime.upper()}ENV_{k}={v}") for k, v in sorted(c.env.items()))] \
        if c.env else []
    words += [c.runtime, "exec"]
    if c.gpu and p.slurm.gpus_per_node:
        words.append("--nv")
    if c.home:
        words += ["--home", expanding(c.home)]
    for b in c.binds:
        words += ["--bind", expanding(b)]
    if _binds_run_dir(c.binds, job):
        words += ["--bind", Raw('"$SLURMTRAIN_RUN_DIR"')]
    if c.workdir:
        words += ["--pwd", expanding(c.workdir)]
    words += [expanding(o) for o in c.options]
    words.append(expanding(c.image))
    return words


def _srun_options(p: Profile, job: JobSpec) -> str:
    c = p.container
    if c.runtime != "pyxis":
        return ""
    # srun writes each node's log (%N: the node's host name): the task's own redirect
    # would run inside the container, before anything else could fail there.
    tag = "%A_%a" if job.array is not None else "%j"  # the names of _job_tag
    opts: list[str] = [Raw(f'--output="$RUN_DIR/logs/{tag}-%N.out"'), Raw("--open-mode=append"),
                       expanding(f"--container-image={c.image}")]
    mounts = [inside_double_quotes(b) for b in c.binds]
    if _binds_run_dir(c.binds, job):
        mounts.append("$RUN_DIR:$RUN_DIR")
    opts.append(Raw('"--container-mounts=' + ",".join(mounts) + '"'))  # one word: shellcheck-clean
    if c.workdir:
        opts.append(expanding(f"--container-workdir={c.workdir}"))
    opts += [expanding(o) for o in c.options]
    return shell_words(opts)


def _program(p: Profile, job: JobSpec) -> tuple[str, Program]:
    """(interpreter that runs the launcher, what the launcher starts on every process).

    The launcher runs under ``launch.python`` when the profile sets it, else under the
    interpreter the command names (a venv's ``bin/python`` is usually not on the job's
    PATH), else ``python3``. A program whose own interpreter is a path other than the
    launcher's keeps it: the launcher starts the whole command as an executable."""
    if not job.command:
        if job.recipe is None:
            raise UsageError("nothing to run: give a command after `--` (for example "
                             "`-- python train.py`) or a built-in trainer recipe with --recipe")
        sets = tuple(w for kv in job.recipe_sets for w in ("--set", kv))
        return p.launch.python or "python3", Program("module", ("slurmtrain.train", "--recipe", job.recipe, *sets),
                                                     None)
    prog = command.parse(job.command)
    _check_launcher_counts(p, prog)
    python = p.launch.python or prog.interpreter or "python3"
    if prog.interpreter and "/" in prog.interpreter and prog.interpreter != python and prog.kind != "exec":
        head = (prog.interpreter, "-m") if prog.kind == "module" else (prog.interpreter,)
        prog = Program("exec", head + prog.argv, prog.interpreter)
    return python, prog


def _check_launcher_counts(p: Profile, prog: Program) -> None:
    """A launcher written in the command is taken over; what it asked for must agree."""
    if prog.launcher_in_command is None:
        return
    # launch.procs_per_node, where the profile sets it, wins over --gpus-per-node: name that one
    procs_how = (f"--set launch.procs_per_node={prog.procs_per_node} (the profile sets it)" if p.launch.procs_per_node
                 else f"--gpus-per-node {prog.procs_per_node} or --set launch.procs_per_node={prog.procs_per_node}")
    for asked, have, what, how in (
            (prog.procs_per_node, procs_per_node(p), "processes per node", procs_how),
            (prog.nnodes, p.slurm.nodes, "nodes", f"--nodes {prog.nnodes}")):
        if asked is not None and asked != have:
            raise UsageError(f"`{prog.launcher_in_command}` in the command asks for {asked} {what}, the profile "
                             f"runs {have}: slurmtrain starts the launcher itself; drop the option, or give {how}")


def _stop_signal_expr(sig: str) -> str:
    name = _signal_name(sig)
    return name if name.isdigit() else f"signal.SIG{name}"


def _task_exec(p: Profile, job: JobSpec) -> str:
    python, prog = _program(p, job)
    spec = launchers.get(p.launch.launcher)
    words = spec.words(launchers.Words(python, prog.kind, p.resilience.rendezvous_timeout, bool(job.command),
                                       prog.launcher_in_command, prog.local_rank_option))
    argv = list(prog.argv)
    if not spec.agent:  # no launcher: its words are the program's own interpreter, on the program's line
        words, argv = [], words + argv
    if job.sweep:  # a point's {key}: its value, from the variable the script exports for it
        from . import sweep as sweep_mod

        argv = [Raw(sweep_mod.shell_word(w)) if isinstance(w, str) and sweep_mod.PLACEHOLDER.search(w) else w
                for w in argv]
    # One line per part (container, launcher, program) so a person can read and edit it.
    parts = [_container_prefix(p, job), words, argv]
    return " \\\n    ".join(shell_words(part) for part in parts if part)


def _gate_exec(p: Profile, job: JobSpec) -> str:
    """The in-job gate's program on each node (resilience.preflight): in the container,
    under the launcher's interpreter, like the run."""
    words = [_program(p, job)[0], "-m", "slurmtrain.doctor.node", "--gate", Raw('"$SLURMTRAIN_GATE_DIR"'),
             "--expect-gpus", str(p.slurm.gpus_per_node), *launchers.get(p.launch.launcher).gate_args]
    return " \\\n    ".join(shell_words(part) for part in (_container_prefix(p, job), words) if part)


def _run_dir_expr(job: JobSpec) -> str:
    if job.run_dir:
        return shlex.quote(job.run_dir)
    # Every task of an array shares the run directory of the array's id.
    job_id = "$SLURM_ARRAY_JOB_ID" if job.array is not None else "$SLURM_JOB_ID"
    return f'"${{SLURMTRAIN_RUN_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_NAME-{job_id}}}"'


def _supervisor_python(p: Profile, job: JobSpec) -> str:
    """Who runs ``python -m slurmtrain.job`` on the batch host: launch.supervisor_python,
    else the interpreter that ran gen/submit, which imports slurmtrain by construction.
    Not launch.python: that one runs the launcher, often inside a container (the supervisor
    runs outside it) or in a training environment that has torch but not slurmtrain."""
    return p.launch.supervisor_python or job.python or sys.executable


def _setup_lines(p: Profile) -> list[str]:
    lines = list(p.launch.setup)
    if p.launch.workdir:
        lines.insert(0, f"cd {shlex.quote(p.launch.workdir)}")
    return lines


def _bytecode_cache(jinja2):
    """Compiled templates cached on disk: compiling them is most of a cold `gen`'s time.
    Jinja checks each template's mtime, so an edited template is recompiled."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "slurmtrain", f"jinja-{__version__}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None  # a read-only home: render without the cache
    return jinja2.FileSystemBytecodeCache(path)


@lru_cache(maxsize=1)
def _environment():
    import jinja2  # deferred: keeps `import slurmtrain.render` cheap for callers that only parse

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resources.templates_dir())),
        bytecode_cache=_bytecode_cache(jinja2),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # bash uses {# in ${#array[@]}; template comments are {## ... ##} instead.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["qv"] = lambda v: shell_words([expanding(str(v))])  # a profile's value: $NAME expands
    return env


def context(loaded: LoadedProfile, job: JobSpec) -> dict:
    """Everything the templates need, decided here."""
    p = loaded.profile
    if job.command and job.recipe:
        raise UsageError("give either --recipe or a command after `--`, not both")
    _check_array(p, job)
    _check_setup(p.launch.setup, f"profile {loaded.name}")
    if job.plain and p.slurm.spare_nodes:
        raise UsageError(f"slurm.spare_nodes = {p.slurm.spare_nodes}: spare nodes need the supervisor, which puts "
                         "a spare in a lost node's place; `gen --plain` has none (drop --plain, or set "
                         "slurm.spare_nodes = 0)")
    return {
        "version": __version__,
        "profile_name": loaded.name,
        # A comment line: a newline inside an argument must not end it (the rest would run).
        "regen_command": (job.regen_command or f"slurmtrain gen --profile {loaded.name}").replace("\n", "\n#   "),
        "sbatch_directives": _sbatch_directives(p, job, f"profile {loaded.name}"),
        "run_dir_expr": _run_dir_expr(job),
        "array": job.array is not None,
        "sweep_cases": _sweep_cases(job),
        "job_tag": _job_tag(job),
        "plain": job.plain,
        "supervisor_python": _supervisor_python(p, job),
        "stop_signal": _signal_name(p.resilience.signal),
        "max_requeues": p.resilience.max_requeues,
        "restarts_in_job": p.resilience.restarts_in_job,
        "spare_nodes": p.slurm.spare_nodes,
        "straggler_pct": f"{p.resilience.straggler_pct:g}",
        "warning_seconds": p.resilience.signal_seconds,
        "hang_timeout": p.resilience.hang_timeout,
        "rendezvous_timeout": p.resilience.rendezvous_timeout,
        "env_exports": _env_exports(p),
        "secrets": list(p.env.secrets),
        "tracking": tracking.template_context(p.tracking, job.job_name),
        "rdzv_port": p.launch.rdzv_port,
        "rdzv_port_spread": p.launch.rdzv_port_spread,
        "procs_per_node": procs_per_node(p),
        "setup_lines": _setup_lines(p),
        "socket_ifname": p.fabric.socket_ifname or "",
        "task_exec": _task_exec(p, job),
        "srun_options": _srun_options(p, job),
        "task_log_redirect": p.container.runtime != "pyxis",
        "stop_timeout": p.resilience.stop_timeout,
        "agent_preamble": launchers.get(p.launch.launcher).agent_preamble.format(stop_timeout=p.resilience.stop_timeout),
        "image_file": _image_file(p),
        "image_expr": shell_words([expanding(_image_file(p))]) if _image_file(p) else "",
        "container_runtime": p.container.runtime if p.container.runtime in ("apptainer", "singularity") else "",
        "stop_signal_expr": _stop_signal_expr(p.resilience.signal),
        "stop_exit_code": EXIT_STOPPED,
        "requeue_when": p.resilience.requeue_when,
        "launcher": p.launch.launcher,
        "L": launchers.get(p.launch.launcher),  # its shape, for the templates (launchers/)
        "preflight": p.resilience.preflight,
        "bad_node_hours": f"{p.resilience.bad_node_hours:g}",
        "gate_exec": _gate_exec(p, job) if p.resilience.preflight else "",
    }


def short_time_limit(loaded: LoadedProfile, starts: bool = False) -> str | None:
    """A time limit no longer than the stop signal's lead and a minute: said (gen warns);
    ``starts``: only one the stop signal would come at the start of (submit refuses it: each
    start would save at once and requeue, up to resilience.max_requeues times)."""
    p, r = loaded.profile, loaded.profile.resilience
    limit = limit_seconds(p.slurm.time) if p.slurm.time else None
    if not limit or limit[0] > r.signal_seconds + (0 if starts else 60):
        return None
    when = "as it starts" if limit[0] <= r.signal_seconds else f"about {limit[0] - r.signal_seconds} s after it starts"
    # Where the value had no hours, it may have meant them ("30" for half an hour is 30 minutes,
    # "0:30" half a minute): how to write them.
    hours = "" if "hours" in limit[1] else "; hours are written H:MM:SS (2:00:00 is two hours)"
    return (f"the time limit (slurm.time, --time) {p.slurm.time} is {limit[0] // 60} min to Slurm ({limit[1]}, "
            f"in whole minutes), and the stop signal comes resilience.signal_seconds ({r.signal_seconds} s) "
            f"before the end: the job would be told to stop {when}: give a longer --time, or a shorter "
            f"resilience.signal_seconds{hours}")


def warnings(loaded: LoadedProfile) -> list[str]:
    """What will work, but not as the user probably expects: said by gen and submit."""
    p, r = loaded.profile, loaded.profile.resilience
    out = []
    if r.stop_timeout > r.signal_seconds:
        out.append(f"{loaded.source}: resilience.stop_timeout ({r.stop_timeout} s) is longer than "
                   f"resilience.signal_seconds ({r.signal_seconds} s): at the time limit Slurm ends the job "
                   "before the checkpoint window is over; raise signal_seconds or lower stop_timeout")
    short = short_time_limit(loaded)
    if short:
        out.append(short)
    if _signal_name(r.signal) in ("USR1", str(int(signal.SIGUSR1))):
        out.append(f"resilience.signal = {r.signal!r} ({loaded.source}): SIGUSR1 is taken: Lightning's SLURM "
                   "auto-requeue handles it (it requeues the job itself, without the run's checkpoint rules), and "
                   "NCCL and parts of PyTorch may use it; USR2, the default, is left alone by all of them")
    for key, value in _expanded_values(p):
        form = shell_form(value)
        if form:
            out.append(f"{key} = {value!r} (profile {loaded.name}, or --set): {form} stays text on the nodes (only $NAME and "
                       "${NAME} expand there): write the value, or set it in a setup line (launch.setup)")
    out += [f"{w} (profile {loaded.name})" for w in sbatchextra.unknown(p.slurm.extra)]
    out += _unset_references(p, loaded.name)
    out += [f"env.vars.{k} = {p.env.vars[k]!r} is replaced by container.env.{k} = {v!r} (profile {loaded.name}): "
            f"container.env is set over the job's environment, the program sees it; give the value there"
            for k, v in sorted(p.container.env.items()) if p.env.vars.get(k, v) != v]
    out += _container_warnings(p, loaded.name)
    window = launchers.get(p.launch.launcher).term_window
    if window is not None and r.stop_timeout > window:
        out.append(f"the launcher {p.launch.launcher} (launch.launcher, --launcher): at preemption (SIGTERM) it "
                   f"kills its workers after {window} s, less than resilience.stop_timeout "
                   f"({r.stop_timeout} s); a longer checkpoint is cut short there (the torchrun and srun "
                   "launchers honour stop_timeout)")
    return out


def _container_warnings(p: Profile, name: str) -> list[str]:
    """apptainer/singularity keys that run, but not as a hand-written line would have meant."""
    c, out = p.container, []
    if c.runtime not in ("apptainer", "singularity"):
        return out
    out += [f"container.options entry {o!r} (profile {name}) holds a space: it reaches {c.runtime} as one argument; "
            "an option and its value are two entries (or OPTION=VALUE)" for o in c.options
            if " " in o.strip() and o.startswith("-") and "=" not in o.split()[0]]
    if c.workdir and any(o.split("=", 1)[0] == "--pwd" for o in c.options):
        out.append(f"container.options has --pwd and container.workdir is {c.workdir!r} (profile {name}): the line "
                   "gets two --pwd; keep container.workdir")
    if c.workdir and not c.workdir.startswith(("/", "$", "~")):
        out.append(f"container.workdir {c.workdir!r} (profile {name}) is relative: {c.runtime}'s --pwd is a path "
                   "inside the image; write it whole (\"/workspace\")")
    if "CUDA_VISIBLE_DEVICES" in c.env:
        out.append(f"container.env.CUDA_VISIBLE_DEVICES (profile {name}) is set for every rank inside the image, "
                   "over what Slurm gives each task: leave GPU visibility to Slurm and the launcher")
    return out


# Set on every node before the script's exports: Slurm's, bash's own.
_SET_IN_THE_JOB = re.compile(r"(SLURM|SLURMD|SLURMTRAIN|SRUN|BASH)_\w+|HOSTNAME|RANDOM|PWD|UID|EUID|PPID|SECONDS|SHLVL")


def _unset_references(p: Profile, name: str) -> list[str]:
    """The script exports the profile's variables under ``set -u``, in the environment
    sbatch gives the job, which is the one here: a ``$NAME`` not set here stops the job
    script at once (``NAME: unbound variable``), before anything runs."""
    out = []
    for key, value in _expanded_values(p):
        # container.env goes to apptainer as APPTAINERENV_ words of the task's line (expanded on
        # the node, as the task starts) except where the script exports it (no container,
        # pyxis): see _env_exports
        exported = key.startswith("env.vars.") or (key.startswith("container.env.")
                                                   and p.container.runtime in ("none", "pyxis"))
        if not exported:
            continue
        unset = [n for n in shellwords.referenced(value) if n not in os.environ and not _SET_IN_THE_JOB.fullmatch(n)]
        if unset:
            out.append(f"{key} = {value!r} (profile {name}, or --set): ${unset[0]} is not set here, and the job gets "
                       "this environment: its script would stop at once (unbound variable); export it before "
                       "submitting, or write the value")
    return out


def _expanded_values(p: Profile) -> list[tuple[str, str]]:
    """The profile's values whose $NAME references expand on the nodes (shellwords.expanding)."""
    c = p.container
    out = [(f"env.vars.{k}", v) for k, v in p.env.vars.items()] + [(f"container.env.{k}", v) for k, v in c.env.items()]
    out += [("container.binds", b) for b in c.binds] + [("container.options", o) for o in c.options]
    out += [(key, v) for key, v in (("container.image", c.image), ("container.home", c.home),
                                    ("container.workdir", c.workdir)) if v]
    return out


def render(loaded: LoadedProfile, job: JobSpec) -> str:
    """The complete job script for ``job`` on the cluster ``loaded`` describes."""
    return _environment().get_template("job.sbatch.j2").render(**context(loaded, job))


def default_job_name(job: JobSpec) -> str:
    """The recipe's name for the built-in trainer, else the program's file name."""
    if job.recipe and not job.command:
        base = os.path.basename(job.recipe).removesuffix(".toml")
    elif job.command:
        prog = command.parse(job.command)
        base = os.path.basename(prog.argv[0]).removesuffix(".py")
    else:
        base = "slurmtrain"
    return re.sub(r"[^A-Za-z0-9_.\-]", "-", base)[:64] or "job"
