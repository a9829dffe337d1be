"""Render a job script from a profile: pure, no side effects.

``render(profile, job) -> str``. The small functions here decide every value; the
Jinja2 templates in ``templates/`` say what the script looks like. Values from a
profile or the command line are shell-quoted (the ``q`` filter, or :func:`shell_words`).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache

from . import __version__, resources
from .errors import UsageError
from .profile import LoadedProfile, Profile


@dataclass(frozen=True)
class JobSpec:
    """What to run, independent of the cluster."""

    command: tuple[str, ...] = ()     # the training command given after `--`
    recipe: str | None = None          # built-in trainer recipe, used when command is empty
    job_name: str = "slurmtrain"
    run_dir: str | None = None         # absolute; None: the script picks runs/<name>-<jobid>
    regen_command: str = ""            # shown in the script's header comment


class Raw(str):
    """A shell fragment written by slurmtrain itself, never quoted (e.g. "$MASTER_ADDR")."""


def shell_words(words) -> str:
    return " ".join(w if isinstance(w, Raw) else shlex.quote(str(w)) for w in words)


# Values that end up on an #SBATCH line, which sbatch (not bash) reads: no quoting
# exists there, so anything that would need it is refused.
_SBATCH_SAFE = re.compile(r"[A-Za-z0-9_./%+:@,=\-\[\]&|]+")
_JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_PYTHON_NAME = re.compile(r"(.*/)?python(\d+(\.\d+)?)?")


def _sbatch_directives(p: Profile, job: JobSpec) -> list[str]:
    s, r = p.slurm, p.resilience
    if not _JOB_NAME.fullmatch(job.job_name):
        raise UsageError(f"job name {job.job_name!r}: use 1-128 letters, digits, '_', '.' or '-'")
    out = [f"--job-name={job.job_name}", f"--nodes={s.nodes}", "--ntasks-per-node=1"]
    if s.gpus_per_node:
        out.append(f"--gres=gpu:{s.gpu_type + ':' if s.gpu_type else ''}{s.gpus_per_node}")
    for flag, value in (("cpus-per-task", s.cpus_per_task), ("mem", s.mem), ("time", s.time),
                        ("partition", s.partition), ("account", s.account), ("qos", s.qos),
                        ("constraint", s.constraint)):
        if value is not None:
            out.append(f"--{flag}={value}")
    if s.exclusive:
        out.append("--exclusive")
    if job.run_dir:
        out.append(f"--output={job.run_dir}/logs/job-%j.out")
    else:
        out.append("--output=slurm-%x-%j.out")
    out.append("--open-mode=append")
    out.append("--requeue" if r.requeue else "--no-requeue")
    out.append(f"--signal=B:{_signal_name(r.signal)}@{r.signal_seconds}")
    out.extend(s.extra)
    for d in out:
        if not _SBATCH_SAFE.fullmatch(d.split("=", 1)[-1]) or "\n" in d:
            raise UsageError(f"#SBATCH {d}: this value cannot be written on an #SBATCH line "
                             "(no spaces or quotes); choose a simpler name or path")
    return out


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
        env["NCCL_PROTO"] = "simple"
    elif f.kind == "socket":
        env["NCCL_IB_DISABLE"] = "1"
    if f.socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = f.socket_ifname
        env["GLOO_SOCKET_IFNAME"] = f.socket_ifname
    if f.nccl_debug and p.slurm.gpus_per_node:
        env["NCCL_DEBUG"] = f.nccl_debug
    env.update(f.env)
    return env


def _env_exports(p: Profile) -> list[tuple[str, str]]:
    env = dict(_fabric_env(p))
    env.update(p.env.vars)
    if p.container.runtime in ("none", "pyxis"):
        env.update(p.container.env)  # pyxis passes the job's environment into the container
    return sorted(env.items())


def _procs_per_node(p: Profile) -> int:
    return p.launch.procs_per_node or p.slurm.gpus_per_node or 1


def _container_prefix(p: Profile) -> list[str]:
    c = p.container
    if c.runtime not in ("apptainer", "singularity"):
        return []
    words: list[str] = [c.runtime, "exec"]
    if c.gpu and p.slurm.gpus_per_node:
        words.append("--nv")
    if c.home:
        words += ["--home", c.home]
    for b in c.binds:
        words += ["--bind", b]
    for k, v in sorted(c.env.items()):
        words += ["--env", f"{k}={v}"]
    if c.workdir:
        words += ["--pwd", c.workdir]
    words += list(c.options)
    words.append(c.image)
    return words


def _srun_options(p: Profile) -> str:
    c = p.container
    if c.runtime != "pyxis":
        return ""
    # Inside a pyxis container the task cannot be relied on to see the run directory, so
    # srun writes each node's log (%N: the node's host name).
    opts: list[str] = [Raw('--output="$RUN_DIR/logs/%j-%N.out"'), Raw("--open-mode=append"),
                       f"--container-image={c.image}"]
    if c.binds:
        opts.append("--container-mounts=" + ",".join(c.binds))
    if c.workdir:
        opts.append(f"--container-workdir={c.workdir}")
    opts += list(c.options)
    return shell_words(opts) + " "


def _program(command: tuple[str, ...], recipe: str | None, python: str) -> tuple[str, list[str]]:
    """How the launcher should start the command: ("script"|"module"|"exec", argv)."""
    if not command:
        if recipe is None:
            raise UsageError("nothing to run: give a command after `--` (for example "
                             "`-- python train.py`) or a built-in trainer recipe with --recipe")
        return "module", ["slurmtrain.train", "--recipe", recipe]
    first = command[0]
    if _PYTHON_NAME.fullmatch(first) and len(command) > 1:
        rest = list(command[1:])
        if rest[0] == "-m" and len(rest) > 1:
            return "module", rest[1:]
        if not rest[0].startswith("-"):
            return "script", rest
    if first.endswith(".py"):
        return "script", list(command)
    return "exec", list(command)


def _task_exec(p: Profile, job: JobSpec) -> str:
    kind, argv = _program(job.command, job.recipe, p.launch.python)
    launcher = p.launch.launcher
    if launcher == "deepspeed":
        words: list[str] = [p.launch.python, "-m", "deepspeed.launcher.launch",
                            Raw('--world_info="$WORLD_INFO"'), Raw('--node_rank="$node_rank"'),
                            Raw('--master_addr="$MASTER_ADDR"'), Raw('--master_port="$MASTER_PORT"')]
        words += {"module": ["--module"], "exec": ["--no_python"], "script": []}[kind]
        if kind != "script" or not job.command:
            # DeepSpeed appends --local_rank=N to the program's arguments unless told not to:
            # the built-in trainer and plain executables read LOCAL_RANK from the environment.
            words.append("--no_local_rank")
    else:
        words = [p.launch.python, "-m", "torch.distributed.run",
                 Raw('--nnodes="$SLURMTRAIN_NNODES"'), Raw('--nproc-per-node="$SLURMTRAIN_PROCS_PER_NODE"')]
        if launcher == "torchrun":
            words += [Raw("--rdzv-backend=c10d"), Raw('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"'),
                      Raw('--rdzv-id="$SLURM_JOB_ID"'),
                      Raw(f'--rdzv-conf="is_host=$(( node_rank == 0 )),join_timeout={p.resilience.rendezvous_timeout}"')]
        else:  # srun-loop: a static rendezvous with the node rank given per node
            words += [Raw('--node-rank="$node_rank"'), Raw('--master-addr="$MASTER_ADDR"'),
                      Raw('--master-port="$MASTER_PORT"')]
        words += {"module": ["-m"], "exec": ["--no-python"], "script": []}[kind]
    # One line per part (container, launcher, program) so a person can read and edit it.
    parts = [_container_prefix(p), words, argv]
    return " \\\n    ".join(shell_words(part) for part in parts if part)


def _run_dir_expr(job: JobSpec) -> str:
    if job.run_dir:
        return shlex.quote(job.run_dir)
    return '"${SLURMTRAIN_RUN_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_NAME-$SLURM_JOB_ID}"'


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
    return env


def context(loaded: LoadedProfile, job: JobSpec) -> dict:
    """Everything the templates need, decided here."""
    p = loaded.profile
    if job.command and job.recipe:
        raise UsageError("give either --recipe or a command after `--`, not both")
    return {
        "version": __version__,
        "profile_name": loaded.name,
        "regen_command": job.regen_command or f"slurmtrain gen --profile {loaded.name}",
        "sbatch_directives": _sbatch_directives(p, job),
        "run_dir_expr": _run_dir_expr(job),
        "stop_signal": _signal_name(p.resilience.signal),
        "signal_seconds": p.resilience.signal_seconds,
        "max_requeues": p.resilience.max_requeues,
        "rendezvous_timeout": p.resilience.rendezvous_timeout,
        "env_exports": _env_exports(p),
        "secrets": list(p.env.secrets),
        "rdzv_port": p.launch.rdzv_port,
        "rdzv_port_spread": p.launch.rdzv_port_spread,
        "procs_per_node": _procs_per_node(p),
        "setup_lines": _setup_lines(p),
        "task_exec": _task_exec(p, job),
        "srun_options": _srun_options(p),
        "task_log_redirect": p.container.runtime != "pyxis",
        "stop_timeout": p.resilience.stop_timeout,
        "launcher": p.launch.launcher,
    }


def render(loaded: LoadedProfile, job: JobSpec) -> str:
    """The complete job script for ``job`` on the cluster ``loaded`` describes."""
    return _environment().get_template("job.sbatch.j2").render(**context(loaded, job))


def default_job_name(job: JobSpec) -> str:
    """The recipe's name for the built-in trainer, else the program's file name."""
    if job.recipe and not job.command:
        base = os.path.basename(job.recipe).removesuffix(".toml")
    elif job.command:
        kind, argv = _program(job.command, None, "")
        base = os.path.basename(argv[0]).removesuffix(".py")
    else:
        base = "slurmtrain"
    return re.sub(r"[^A-Za-z0-9_.\-]", "-", base)[:64] or "job"
