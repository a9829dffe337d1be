"""What the user's command after ``--`` is: its interpreter, its program, and any
launcher written into it.

Users copy commands from READMEs: ``torchrun --nproc_per_node 8 train.py``,
``deepspeed train.py --deepspeed ds.json``, ``/shared/venv/bin/python train.py``. The job
script starts a launcher on every node itself, so a launcher in the command would start
a launcher per process (separate worlds of size 1 that all "succeed"). ``parse`` takes
torchrun and DeepSpeed's launcher apart and keeps the program; ``accelerate launch`` and
``srun`` are refused with the command to write instead. Pure: no I/O.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from .errors import UsageError
from .schema import Frozen

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


@dataclass(frozen=True, repr=False, eq=False)  # repr, == and hash: schema.Frozen's, not compiled at import
class Program(Frozen):
    """How a launcher should start the user's program on every process."""

    kind: str                  # "script" (a .py file), "module" (-m NAME) or "exec" (any executable)
    argv: tuple[str, ...]      # the script/module/executable and its arguments
    interpreter: str | None    # the Python the user named (runs the launcher too), if any
    procs_per_node: int | None = None  # what a launcher written in the command asked for
    nnodes: int | None = None
    launcher_in_command: str | None = None  # "torchrun", "deepspeed", ... when one was taken apart
    local_rank_option: bool = False  # that launcher would have appended --local_rank=N (deepspeed, launch)
    dropped: tuple[str, ...] = ()    # its options the job script sets itself (--master_port 1234, --standalone)


def is_python(word: str) -> bool:
    """python, python3, python3.11, /opt/conda/bin/python3.11, ..."""
    return bool(_PYTHON.fullmatch(os.path.basename(word)))


def parse(command: tuple[str, ...]) -> Program:
    if not command:
        raise UsageError("empty command after `--`")
    head = os.path.basename(command[0])
    if head in ("torchrun", "torch-run"):
        return _torchrun(command[1:], _sibling_python(command[0]), "torchrun")
    if head == "deepspeed":
        return _deepspeed(command[1:], _sibling_python(command[0]))
    if head == "accelerate" and len(command) > 1 and command[1] == "launch":
        raise UsageError(_refusal("accelerate launch", command[2:], command[0]))
    if head == "accelerate-launch":  # its other entry point
        raise UsageError(_refusal("accelerate-launch", command[1:], command[0]))
    if head == "srun":
        raise UsageError("`srun` in the command: the job script starts the tasks with srun itself "
                         "(one per node, or one per process with --launcher srun); write the program alone, "
                         f"e.g. `-- {shlex.join(_script_after_options(command[1:]) or ['python', 'train.py'])}`")
    if is_python(command[0]):
        return _python(command)
    if command[0].endswith(".py"):
        return Program("script", tuple(command), None)
    return Program("exec", tuple(command), None)


def _python(command: tuple[str, ...]) -> Program:
    interp, rest = command[0], list(command[1:])
    if rest[:1] == ["-m"] and len(rest) > 1:
        if rest[1] in ("torch.distributed.run", "torch.distributed.launch"):
            return _torchrun(tuple(rest[2:]), interp, f"{os.path.basename(interp)} -m {rest[1]}",
                             local_rank=rest[1] == "torch.distributed.launch")
        if rest[1] in ("deepspeed.launcher.runner", "deepspeed"):
            return _deepspeed(tuple(rest[2:]), interp)
        if rest[1] == "accelerate.commands.launch":
            raise UsageError(_refusal(f"{interp} -m accelerate.commands.launch", rest[2:], interp))
        if rest[1] == "accelerate.commands.accelerate_cli" and rest[2:3] == ["launch"]:
            raise UsageError(_refusal(f"{interp} -m accelerate.commands.accelerate_cli launch", rest[3:], interp))
        return Program("module", tuple(rest[1:]), interp)
    if rest and not rest[0].startswith("-"):
        return Program("script", tuple(rest), interp)
    # Interpreter options (-u, -X dev, -W ...) or nothing: the launcher runs the whole
    # command as an executable, so the options reach the program's interpreter.
    return Program("exec", tuple(command), interp)


def _sibling_python(launcher_path: str) -> str | None:
    """``/venv/bin/torchrun`` -> ``/venv/bin/python``: the environment the user chose.
    A bare ``torchrun`` (found on PATH) says nothing about the interpreter."""
    if "/" not in launcher_path:
        return None
    return os.path.join(os.path.dirname(launcher_path), "python")


# torchrun options the job script takes over: (names, takes a value, what it sets).
_TORCHRUN_OPTS = {
    "nproc-per-node": "procs", "nproc_per_node": "procs", "nnodes": "nnodes",
    "node-rank": None, "node_rank": None, "master-addr": None, "master_addr": None,
    "master-port": None, "master_port": None, "rdzv-backend": None, "rdzv_backend": None,
    "rdzv-endpoint": None, "rdzv_endpoint": None, "rdzv-id": None, "rdzv_id": None,
    "rdzv-conf": None, "rdzv_conf": None, "rdzv-timeout": None, "max-restarts": None,
    "max_restarts": None, "monitor-interval": None, "monitor_interval": None,
    "local-addr": None, "local_addr": None, "log-dir": None, "log_dir": None,
    "redirects": None, "tee": None, "role": None, "start-method": None, "start_method": None,
}
_TORCHRUN_FLAGS = {"standalone": None, "module": "module", "m": "module", "no-python": "exec",
                   "no_python": "exec", "use-env": None, "use_env": None}
_DEEPSPEED_OPTS = {"num_gpus": "procs", "num-gpus": "procs", "num_nodes": "nnodes", "num-nodes": "nnodes",
                   "hostfile": None, "H": None, "master_port": None, "master_addr": None, "include": "include",
                   "i": "include", "exclude": "exclude", "e": "exclude", "launcher": None, "launcher_args": None,
                   "node_rank": None, "min_elastic_nodes": None, "max_elastic_nodes": None}
_DEEPSPEED_FLAGS = {"module": "module", "no_python": "exec", "no_local_rank": None, "force_multi": None,
                    "save_pid": None, "autotuning": None, "enable_each_rank_log": None,
                    "bind_cores_to_rank": None, "no_ssh_check": None, "no_ssh": None}


def _torchrun(args: tuple[str, ...], interp: str | None, name: str, local_rank: bool = False) -> Program:
    """``local_rank``: torch.distributed.launch, which appends --local-rank=N unless --use-env."""
    return _launcher(args, interp, name, _TORCHRUN_OPTS, _TORCHRUN_FLAGS, local_rank)


def _deepspeed(args: tuple[str, ...], interp: str | None) -> Program:
    return _launcher(args, interp, "deepspeed", _DEEPSPEED_OPTS, _DEEPSPEED_FLAGS, local_rank=True)


_NO_LOCAL_RANK = ("no_local_rank", "use-env", "use_env")


def _launcher(args: tuple[str, ...], interp: str | None, name: str, opts: dict, flags: dict,
              local_rank: bool) -> Program:
    """Take a launcher's options apart; what is left is the program and its arguments."""
    found: dict[str, str] = {}
    dropped: list[str] = []
    kind = "script"
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        word = args[i]
        key, _, value = word.lstrip("-").partition("=")
        if key in flags:
            kind = flags[key] or kind
            local_rank = local_rank and key not in _NO_LOCAL_RANK
            if flags[key] is None and key not in _NO_LOCAL_RANK:
                dropped.append(args[i])
            i += 1
            continue
        if key not in opts:
            raise UsageError(f"`{name}` in the command with option {args[i]!r}, which slurmtrain cannot take "
                             f"over: the job script starts the launcher on every node itself; write "
                             f"`-- {_plain(interp, args)}` and set launcher options in the profile ([launch])")
        if not value:
            if i + 1 >= len(args):
                raise UsageError(f"`{name}` option {args[i]!r} in the command has no value")
            value, i = args[i + 1], i + 1
        if opts[key]:
            found[opts[key]] = value
        else:
            dropped.append(word if "=" in word else f"{word} {value}")
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    program = tuple(args[i:])
    if not program:
        raise UsageError(f"`{name}` in the command names no program to run")
    if kind == "script" and not program[0].endswith(".py") and interp is None and name == "deepspeed":
        kind = "exec"
    if "exclude" in found:
        raise UsageError(f"`deepspeed --exclude {found['exclude']}` in the command: the job runs on the nodes Slurm "
                         "gives it; leave nodes out with sbatch's --exclude, GPUs with launch.procs_per_node (and "
                         "CUDA_VISIBLE_DEVICES in the profile's [env] vars)")
    if "include" in found:
        found["procs"] = _included_slots(found["include"], found.get("procs"))
        hosts = [part.split(":")[0] for part in found["include"].split("@") if part.split(":")[0] != "localhost"]
        if hosts:  # the nodes are Slurm's: said, not dropped silently
            dropped.append(f"--include hosts {' '.join(hosts)}")
    return Program(kind, program, interp, _count(found.get("procs"), name, "processes per node"),
                   _count(found.get("nnodes"), name, "nodes"), name, local_rank and kind in ("script", "module"),
                   tuple(dropped))


def _included_slots(spec: str, procs: str | None) -> str | None:
    """``deepspeed --include localhost:0,1`` (or ``n1:0,1@n2:0,1``): the processes it starts
    per node, checked against the profile's as --num_gpus is. All of a host (no ``:``): none."""
    counts = {len(part.split(":", 1)[1].split(",")) for part in spec.split("@") if ":" in part}
    if len(counts) > 1:
        raise UsageError(f"`deepspeed --include {spec}` in the command starts different numbers of processes on "
                         "different nodes; slurmtrain starts the same number on every node (launch.procs_per_node)")
    if counts and procs is not None and str(counts.pop()) != procs:
        raise UsageError(f"`deepspeed --include {spec} --num_gpus {procs}` in the command disagree on the "
                         "processes per node")
    return procs if not counts else str(next(iter(counts)))


def _count(value: str | None, launcher: str, what: str) -> int | None:
    if value is None:
        return None
    if value in ("gpu", "auto"):
        return None  # "one per GPU": what the profile does anyway
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"`{launcher}` in the command asks for {value!r} {what}: slurmtrain needs a fixed "
                         f"count (set it with --nodes / --gpus-per-node or launch.procs_per_node)")
    return int(value)


def _plain(interp: str | None, args) -> str:
    words = _script_after_options(list(args))
    return shlex.join([interp or "python"] + words) if words else "python train.py ..."


def _script_after_options(args) -> list[str]:
    """The program and its arguments after a launcher's options: from the first word that
    is a Python interpreter or looks like a script (``*.py``) on."""
    args = list(args)
    for i, word in enumerate(args):
        if not word.startswith("-") and (word.endswith(".py") or is_python(word)):
            return args[i:]
    return []


# `accelerate launch` options and the variables it gives the program for them, which
# Accelerator() reads (accelerate/utils/launch.py). Its config file is read by the
# launcher alone: without it, the settings must reach the program as these variables.
_ACCELERATE_ENV = {"mixed_precision": "ACCELERATE_MIXED_PRECISION", "cpu": "ACCELERATE_USE_CPU",
                   "gradient_accumulation_steps": "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
                   "dynamo_backend": "ACCELERATE_DYNAMO_BACKEND", "use_fsdp": "ACCELERATE_USE_FSDP",
                   "use_deepspeed": "ACCELERATE_USE_DEEPSPEED", "zero_stage": "ACCELERATE_DEEPSPEED_ZERO_STAGE",
                   "deepspeed_config_file": "ACCELERATE_DEEPSPEED_CONFIG_FILE"}


def _accelerate_sets(options: list[str]) -> list[str]:
    """``--set env.vars.X=V`` for each option of ``options`` (those before the script) that
    `accelerate launch` turns into a variable."""
    out = []
    for i, word in enumerate(options):
        key, eq, value = word.lstrip("-").replace("-", "_").partition("=")
        if key not in _ACCELERATE_ENV:
            continue
        if not eq:
            nxt = options[i + 1] if i + 1 < len(options) else ""
            value = "true" if not nxt or nxt.startswith("-") else nxt
        out.append(f"--set env.vars.{_ACCELERATE_ENV[key]}={value}")
    return out


def _refusal(launcher: str, args: list[str], interp: str) -> str:
    program = _script_after_options(args)
    python = _sibling_python(interp) or "python"
    instead = shlex.join([python] + program) if program else "python train.py ARGS"
    sets = _accelerate_sets(list(args)[:len(args) - len(program)])
    settings = (f"give its options as the variables it would set: {' '.join(sets)}" if sets else
                "give its settings as the variables `accelerate launch` would set (ACCELERATE_MIXED_PRECISION, "
                "ACCELERATE_USE_FSDP and FSDP_*, ...) in the profile's [env] vars, or in Accelerator(...) in the "
                "script: its config file is read by the launcher alone")
    return (f"`{launcher}` in the command: slurmtrain starts one process per GPU on every node itself "
            f"(torchrun's environment, which Accelerate reads); write `-- {instead}` and {settings}")
