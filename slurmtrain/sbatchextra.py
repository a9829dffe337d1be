"""A profile's ``slurm.extra``: the #SBATCH directives the job script does not write itself.

The script writes its own directives first and ``slurm.extra`` after them, and sbatch takes
the last of two: an extra ``--output`` hid the batch log from ``status`` and ``logs``, an
extra ``--no-requeue`` turned survival off, both without a word. So a directive the
script owns is refused here, naming what sets it; one a profile key also sets is refused
only when both do; an ``--exclude`` joins the bad-node ledger's; a name sbatch does not
know is warned of (a site's newer sbatch may know it). Standard library only.
"""

from __future__ import annotations

import difflib

from .errors import UsageError

_TASKS = ("launch.procs_per_node: the job runs one launcher task a node (the srun launcher one a process), "
          "which starts the processes")
# Directives the job script always writes, and what to use instead.
_OWNED = {
    "--job-name": "the job's name is --name (its run directory is named after it)",
    "--nodes": "slurm.nodes (-N)",
    "--ntasks": _TASKS,
    "--ntasks-per-node": _TASKS,
    "--output": "the batch log is <run>/logs/job-%j.out, where status and logs read it",
    "--error": "the batch log holds stdout and stderr together, where status finds the error it names",
    "--open-mode": "the batch log is appended to, so a requeued job's start follows the last one's",
    "--requeue": "resilience.requeue",
    "--no-requeue": "resilience.requeue = false",
    "--signal": "resilience.signal and resilience.signal_seconds",
    "--array": "slurmtrain tracks a job array only when it makes one itself (`slurmtrain tokenize --profile P "
               "--nodes N`, `submit --sweep`)",
}
# Directives a profile key writes when it is set: extra may give them when it is not.
_KEYED = {"--time": "slurm.time", "--partition": "slurm.partition", "--account": "slurm.account",
          "--qos": "slurm.qos", "--constraint": "slurm.constraint", "--mem": "slurm.mem",
          "--cpus-per-task": "slurm.cpus_per_task", "--gres": "slurm.gpus_per_node", "--exclusive": "slurm.exclusive"}
_SHORT = {"-J": "--job-name", "-N": "--nodes", "-n": "--ntasks", "-o": "--output", "-e": "--error",
          "-a": "--array", "-t": "--time", "-p": "--partition", "-A": "--account", "-q": "--qos",
          "-C": "--constraint", "-c": "--cpus-per-task", "-x": "--exclude"}
# sbatch's long options, Slurm 22.05 to 24.11 (their man pages).
KNOWN = frozenset("""
account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint container
container-id contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot
dependency distribution error exact exclude exclusive export export-file extra extra-node-info get-user-env gid
gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags help hint hold ignore-pbs
input job-name kill-on-invalid-dep license licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu
mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks ntasks-per-core
ntasks-per-gpu ntasks-per-node ntasks-per-socket oom-kill-step open-mode output overcommit oversubscribe
parsable partition power prefer priority profile propagate qos quiet reboot requeue reservation resv-ports
segment signal sockets-per-node spread-job stepmgr switches test-only thread-spec threads-per-core time
time-min tmp tres-bind tres-per-task uid usage use-min-nodes verbose version wait wait-all-nodes wckey wrap
""".split())


def name_of(directive: str) -> str:
    """``--Key=value`` -> ``--key``; a short option by its long name."""
    name = directive.split("=", 1)[0]
    return _SHORT.get(name, name)


def owned(extra: tuple[str, ...]) -> tuple[str, str] | None:
    """The first directive of ``extra`` the job script writes itself, and why it cannot be
    given: checked as the profile loads (naming the file or --set that gave it), and here."""
    for directive in extra:
        name = name_of(directive)
        if name in _OWNED:
            return directive, (f"the job script writes {name} itself, and sbatch would take this one instead: "
                               f"{_OWNED[name]}; drop it from slurm.extra")
    return None


def check(extra: tuple[str, ...], set_keys: set[str], where: str) -> None:
    """UsageError for a directive of ``extra`` the job script writes itself (``set_keys``:
    the directives the profile's own keys write); ``where``: the profile, for the message."""
    said = owned(extra)
    if said is not None:
        raise UsageError(f"slurm.extra has {said[0]} ({where}): {said[1]}")
    for directive in extra:
        name = name_of(directive)
        if name in _KEYED and name in set_keys:
            raise UsageError(f"slurm.extra has {directive} ({where}) and {_KEYED[name]} is set too: sbatch would "
                             f"take the last of the two; give it once, as {_KEYED[name]}")


def excluded(extra: tuple[str, ...]) -> list[str]:
    """The nodes ``extra``'s --exclude directives name (the script writes one --exclude:
    these and the bad-node ledger's)."""
    return [n for d in extra if name_of(d) == "--exclude" for n in d.split("=", 1)[-1].split(",") if n]


def without_exclude(extra: tuple[str, ...]) -> list[str]:
    return [d for d in extra if name_of(d) != "--exclude"]


def unknown(extra: tuple[str, ...]) -> list[str]:
    """Warnings for the long options sbatch does not know (it refuses the whole job)."""
    out = []
    for directive in extra:
        name = name_of(directive)
        if name.startswith("--") and name[2:] not in KNOWN:
            close = difflib.get_close_matches(name[2:], KNOWN, n=1, cutoff=0.75)
            out.append(f"slurm.extra has {directive}: sbatch knows no {name}"
                       + (f" (did you mean --{close[0]}?)" if close else "") + "; sbatch would refuse the job")
    return out
