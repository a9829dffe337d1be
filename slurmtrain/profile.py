"""Cluster profiles: typed, frozen, validated when loaded.

A profile is a TOML file in ``configs/clusters/`` (or a user's own directory) that says
everything about a cluster a job script needs: Slurm directives, container runtime,
network fabric, launcher and survival settings. A profile may ``extends`` another.

Look-up order for a name: a path given as is, ``./.slurmtrain/clusters/``,
``~/.config/slurmtrain/clusters/``, then the built-ins.
"""

from __future__ import annotations

import hashlib
import os
from ._toml import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from . import launchers, resources, sbatchextra
from .errors import ConfigError
from .schema import (ENV_NAME, Frozen, Sources, apply_set, build, field, matches, merge,
                     non_negative, parse_set, positive, to_toml)

_SLURM_NAME = matches(r"[A-Za-z0-9_.,:+\-\[\]]+", "a Slurm name (letters, digits, _ . , : + - [ ])")
_TIME = matches(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+|UNLIMITED|INFINITE",
                "a Slurm time such as 90 (minutes), 1:30:00 or 2-00:00:00")
_MEM = matches(r"\d+[KMGT]?", "a Slurm memory size such as 64G or 0")
_SIGNAL = matches(r"(SIG)?(USR1|USR2|TERM|INT|HUP|QUIT|ALRM|URG|CONT|[0-9]{1,2})",
                  "a signal name such as USR2 or TERM")
_TRACK_WORD = matches(r"[A-Za-z0-9_.:/+\-]+", "a W&B name: letters, digits, _ . : / + - (no spaces or commas)")
_BIND = matches(r"[^:\s]+(:[^:\s]+(:(ro|rw))?)?", "a bind mount src[:dst[:ro|rw]] without spaces")

# Every class here is frozen and takes repr, == and hash from schema.Frozen (repr=False,
# eq=False): the same methods, not compiled again for each class when gen starts.


@dataclass(frozen=True, repr=False, eq=False)
class SlurmSection(Frozen):
    """#SBATCH directives."""

    partition: str | None = field("partition to run in (none: the cluster's default)", None, check=_SLURM_NAME)
    account: str | None = field("account to charge", None, check=_SLURM_NAME)
    qos: str | None = field("quality of service", None, check=_SLURM_NAME)
    nodes: int = field("number of nodes", 1, check=positive)
    spare_nodes: int = field("nodes allocated beyond `nodes` and kept idle: one takes the place of a node lost in "
                             "the job (dead, down, failing again and again) without going back to the queue; the "
                             "job is submitted with --no-kill so that a dead node does not end it", 0,
                             check=non_negative)
    gpus_per_node: int = field("GPUs per node (0 for CPU-only clusters)", 0, check=non_negative)
    gpu_type: str | None = field("GPU type in --gres (e.g. a100); none: any", None, check=_SLURM_NAME)
    cpus_per_task: int | None = field("CPUs for the one task per node (the srun launcher divides them among its tasks)", None, check=positive)
    mem: str | None = field("memory per node, e.g. 0 (all) or 500G", None, check=_MEM)
    time: str | None = field("time limit, e.g. 2-00:00:00, or minutes", None, check=_TIME, int_as_text=True)
    constraint: str | None = field("node features (--constraint)", None)
    exclusive: bool = field("ask for whole nodes", False)
    extra: tuple[str, ...] = field("extra #SBATCH directives, e.g. '--reservation=r1'", (),
                                   check=matches(r"--?[A-Za-z][\w\-]*(=\S.*)?", "a directive such as --mail-type=END"))


@dataclass(frozen=True, repr=False, eq=False)
class ContainerSection(Frozen):
    """How the launched command runs inside a container."""

    runtime: Literal["none", "apptainer", "singularity", "pyxis"] = field("container runtime", "none")
    image: str | None = field("image: a .sif path for apptainer/singularity, a squashfs or registry image for pyxis", None)
    binds: tuple[str, ...] = field("bind mounts src[:dst[:ro]]", (), check=_BIND)
    env: dict[str, str] = field("environment set inside the container", {}, factory=dict)
    workdir: str | None = field("working directory inside the container", None)
    home: str | None = field("apptainer/singularity --home src[:dst]", None)
    options: tuple[str, ...] = field("extra runtime options, passed as given (each one argument)", ())
    gpu: bool = field("pass GPUs into the container (--nv); defaults on when gpus_per_node > 0", True)


@dataclass(frozen=True, repr=False, eq=False)
class FabricSection(Frozen):
    """The network between nodes and the NCCL/libfabric environment it needs."""

    kind: Literal["efa", "ib", "socket", "none"] = field("efa (AWS), ib (InfiniBand), socket (TCP), none", "socket")
    gpu_rdma: bool = field("EFA GPU-direct RDMA (p4d/p5: true; g5/g4dn: false)", False)
    socket_ifname: str | None = field("network interface for NCCL/gloo sockets: NCCL_SOCKET_IFNAME as given; GLOO_SOCKET_IFNAME each node's interface it names (none for ^...)", None,
                                      check=matches(r"[\w.\-^,=]+", "an interface name such as eth0 or ^lo,docker"))
    nccl_debug: Literal["", "WARN", "INFO", "TRACE"] = field("NCCL_DEBUG level; empty: unset", "WARN")
    env: dict[str, str] = field("extra environment for this fabric", {}, factory=dict)
    expected_busbw_gbps: float | None = field("all-reduce bus bandwidth (GB/s) that `slurmtrain doctor` expects; "
                                              "below 90% fails (none: not compared). Doctor's own figure (one "
                                              "process a node, a 4 MiB all-reduce), not nccl-tests' large-message, "
                                              "all-GPU one: take it from a doctor run on healthy nodes",
                                              None, check=positive)


@dataclass(frozen=True, repr=False, eq=False)
class LaunchSection(Frozen):
    """How processes are started on the nodes."""

    launcher: str = field(launchers.doc(), "torchrun", check=launchers.check)  # one of launchers.LAUNCHERS
    procs_per_node: int | None = field("processes per node (default: gpus_per_node, or 1)", None, check=positive)
    rdzv_port: int = field("rendezvous / master port on the first node", 29500,
                           check=lambda v: None if 1024 <= v <= 65535 else f"expected a port between 1024 and 65535, got {v}")
    rdzv_port_spread: int = field("add SLURM_JOB_ID modulo this to rdzv_port, so jobs sharing a node do not collide (0: fixed port)",
                                  0, check=non_negative)
    python: str | None = field("python interpreter for the built-in trainer and launchers (default: the one "
                               "the command names, else python3)", None)
    supervisor_python: str | None = field("python interpreter that supervises the job on its first node; it must "
                                          "import slurmtrain, outside any container (default: the one that ran "
                                          "gen/submit)", None)
    setup: tuple[str, ...] = field("shell lines run before launching (module load, conda/venv activation); taken as shell", ())
    workdir: str | None = field("directory to cd into before launching (default: the submit directory)", None)


@dataclass(frozen=True, repr=False, eq=False)
class EnvSection(Frozen):
    """Environment for the job."""

    vars: dict[str, str] = field("environment variables exported in the script", {}, factory=dict)
    secrets: tuple[str, ...] = field("names of variables holding secrets: passed through by name, never written", (), check=ENV_NAME)


@dataclass(frozen=True, repr=False, eq=False)
class TrackingSection(Frozen):
    """Experiment tracking: one W&B run and one TensorBoard log across every requeue (docs/tracking.md)."""

    wandb: bool = field("report to Weights & Biases (the wandb package; the built-in trainer logs, and "
                        "WANDB_RUN_ID/WANDB_RESUME/WANDB_PROJECT/WANDB_DIR are exported for any program)", False)
    tensorboard: bool = field("the built-in trainer writes TensorBoard events into <run dir>/tensorboard", False)
    mode: Literal["offline", "online"] = field("W&B mode: offline (files in the run directory, `slurmtrain sync RUN` "
                                               "uploads them later) or online", "offline")
    project: str | None = field("W&B project (default: the job name)", None, check=_TRACK_WORD)
    entity: str | None = field("W&B entity, a user or team (default: the API key's)", None, check=_TRACK_WORD)
    name: str | None = field("W&B run display name (default: the run directory's name)", None)
    tags: tuple[str, ...] = field("W&B run tags", (), check=_TRACK_WORD)
    api_key_var: str = field("variable holding the W&B API key in the submitting environment, passed through "
                             "by name in online mode, never written", "WANDB_API_KEY", check=ENV_NAME)


@dataclass(frozen=True, repr=False, eq=False)
class ResilienceSection(Frozen):
    """Requeue and signal handling (see the preemption docs)."""

    requeue: bool = field("let Slurm requeue the job after preemption or node failure", True)
    signal: str = field("warning signal sent before the time limit (USR2: NCCL and torchrun leave it alone)", "USR2", check=_SIGNAL)
    signal_seconds: int = field("seconds before the time limit that the warning signal arrives", 120, check=positive)
    max_requeues: int = field("stop requeueing after this many requeues (0: never requeue); a requeue at the time "
                              "limit after a start that saved a newer checkpoint does not count, so a run longer "
                              "than its time limit goes on while each start moves it on", 10, check=non_negative)
    hang_timeout: int = field("seconds without a heartbeat from any rank (the built-in trainer, slurmtrain.stop."
                              "heartbeat, the HF and Lightning callbacks) before the launch counts as hung: stacks "
                              "recorded, launched again in the job (0: 10x the slowest gap between heartbeats, at "
                              "least 120 for the built-in trainer, which beats through its saves and evaluations, "
                              "600 for other programs)", 0, check=non_negative)
    restarts_in_job: int = field("after a program failure (a rank died) that followed a new checkpoint, or a "
                                 "launch srun could not start on a node, start the launch again in the same "
                                 "allocation, at most this many times per job start (0: never)", 3,
                                 check=non_negative)
    checkpoint_every: Literal["recipe", "auto"] = field(
        "how often the built-in trainer saves: the recipe's train.save_steps (recipe), or the Young-Daly interval "
        "sqrt(2 x checkpoint cost x mean time between faults) from measured costs and node_mtbf_hours (auto)",
        "recipe")
    node_mtbf_hours: float = field("mean hours between faults of one node (checkpoint_every = \"auto\"); the job's "
                                   "shrinks with its node count, and the faults the run meets refine it", 5000.0,
                                   check=positive)
    straggler_pct: float = field("name a node (events, status, bad-node ledger) whose ranks compute this many percent "
                                 "slower than the other nodes' for the same work, measured by the built-in trainer "
                                 "(0: off)", 30.0, check=non_negative)
    stop_timeout: int = field("seconds the script waits for a checkpoint after a stop signal, then SIGTERM, "
                              "then SIGKILL", 90, check=positive)
    requeue_when: Literal["saved", "always"] = field(
        "after a stop, requeue only when the program has reported a checkpoint in this run or exited 75 "
        "(saved), or in any case (always)", "saved")
    rendezvous_timeout: int = field("seconds for all nodes to join before the job fails naming the missing ones", 300, check=positive)
    bad_node_hours: float = field("hours a node in the bad-node ledger (runs/bad-nodes.jsonl) stays excluded from "
                                  "new jobs and requeues (0: recorded, never excluded)", 24.0, check=non_negative)
    preflight: bool = field("before the launcher, every node runs doctor's fast checks; a failing node goes to the "
                            "ledger and the job requeues itself without it", False)


@dataclass(frozen=True, repr=False, eq=False)
class Profile(Frozen):
    """A cluster profile. ``name`` and ``source`` are filled in by the loader."""

    description: str = field("one line about the cluster", "")
    slurm: SlurmSection = field("Slurm directives", factory=SlurmSection)
    container: ContainerSection = field("container", factory=ContainerSection)
    fabric: FabricSection = field("network fabric", factory=FabricSection)
    launch: LaunchSection = field("launcher", factory=LaunchSection)
    env: EnvSection = field("environment", factory=EnvSection)
    resilience: ResilienceSection = field("requeue and signals", factory=ResilienceSection)
    tracking: TrackingSection = field("experiment tracking (W&B, TensorBoard)", factory=TrackingSection)
    allowed_launchers: tuple[str, ...] = field(
        "launchers that work on this cluster (default: all)", check=launchers.check, factory=launchers.names)


@dataclass(frozen=True, repr=False, eq=False)
class LoadedProfile(Frozen):
    name: str
    source: str          # the file it came from
    profile: Profile

    def to_toml(self) -> str:
        return f"# profile {self.name} (from {self.source}, after extends and --set)\n" + to_toml(self.profile)

    def digest(self) -> str:
        return hashlib.sha256(to_toml(self.profile).encode()).hexdigest()[:16]


def limit_seconds(text: str) -> tuple[int, str] | None:
    """sbatch's ``--time`` -> (seconds, the form Slurm read it in); None: no limit.
    ``90`` is minutes, ``2:00`` minutes:seconds, ``1:30:00`` hours:minutes:seconds, and
    after ``D-`` hours, hours:minutes or hours:minutes:seconds. Zero, in any form, is no
    limit to Slurm."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if not any(parts) and not int(days or 0):
        return None
    if days:
        forms = ("days-hours", "days-hours:minutes", "days-hours:minutes:seconds")
        h, m, sec = (parts + [0, 0])[:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + sec, forms[len(parts) - 1]
    forms = ("minutes", "minutes:seconds", "hours:minutes:seconds")
    scales = ((60,), (60, 1), (3600, 60, 1))[len(parts) - 1]
    seconds = sum(v * k for v, k in zip(parts, scales))
    return -(-seconds // 60) * 60, forms[len(parts) - 1]  # Slurm keeps whole minutes, rounded up


def search_dirs(cwd: Path | None = None) -> list[Path]:
    cwd = cwd or Path.cwd()
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [cwd / ".slurmtrain" / "clusters", home / "slurmtrain" / "clusters", resources.clusters_dir()]


def find(name: str, cwd: Path | None = None, relative_to: Path | None = None) -> Path:
    """A profile name or path -> its file. Paths contain '/' or end in .toml."""
    if "/" in name or name.endswith(".toml"):
        path = Path(name)
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        if not path.is_file():
            named = Path(name).stem if name.endswith(".toml") and "/" not in name else None
            hint = f" (a profile named {named!r} exists: --profile {named})" if named in available(cwd) else ""
            raise ConfigError(str(path), "", f"profile file not found{hint}")
        return path
    for d in search_dirs(cwd):
        path = d / f"{name}.toml"
        if path.is_file():
            return path
    known = sorted(available(cwd))
    from .schema import _near
    raise ConfigError(f"profile {name!r}", "", f"not found{_near(name, known)}; known profiles: {', '.join(known)}"
                      f" (searched {', '.join(str(d) for d in search_dirs(cwd))})")


def available(cwd: Path | None = None) -> dict[str, Path]:
    """Profile name -> file, earlier directories shadowing later ones."""
    found: dict[str, Path] = {}
    for d in reversed(search_dirs(cwd)):
        if d.is_dir():
            for p in sorted(d.glob("*.toml")):
                found[p.stem] = p
    return found


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(str(path), "", f"not valid TOML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(path), "", f"cannot read: {err}") from None


def _resolve(path: Path, sources: Sources, chain: list[Path], cwd: Path | None) -> dict[str, Any]:
    """The profile's data with its ``extends`` chain merged in, parents first."""
    if path.resolve() in [p.resolve() for p in chain]:
        cycle = " -> ".join(str(p) for p in chain + [path])
        raise ConfigError(str(path), "extends", f"extends cycle: {cycle}")
    data = _read_toml(path)
    parent = data.pop("extends", None)
    base: dict[str, Any] = {}
    if parent is not None:
        if not isinstance(parent, str) or not parent:
            raise ConfigError(str(path), "extends", f"expected a profile name or path, got {parent!r}")
        base = _resolve(_parent(parent, path, chain, cwd), sources, chain + [path], cwd)
    sources.record(data, str(path))
    return merge(base, data)


def _parent(name: str, child: Path, chain: list[Path], cwd: Path | None) -> Path:
    """The file ``extends = name`` means in ``child``. A name the child's own file shadows
    (``aws-p5.toml`` in a project directory that extends "aws-p5") is the next one in
    look-up order: the built-in it customises."""
    if "/" not in name and not name.endswith(".toml"):
        seen = {p.resolve() for p in chain + [child]}
        later = [d / f"{name}.toml" for d in search_dirs(cwd)]
        later = [p for p in later if p.is_file() and p.resolve() not in seen]
        if later:
            return later[0]
    try:
        return find(name, cwd, relative_to=child.parent)
    except ConfigError as err:  # the file that says `extends` is where to look
        raise ConfigError(str(child), "extends", f"{err}") from None


def load_profile(name: str, sets: Iterable[str | tuple[str, str]] = (), cwd: Path | None = None) -> LoadedProfile:
    """Find, merge (``extends``), override (``--set``) and validate a profile. A set is
    ``KEY=VALUE``, or (``KEY=VALUE``, what the user typed: ``--time 1h``) for an option
    that stands for one, so that an error names what was typed."""
    path = find(name, cwd)
    sources = Sources(str(path))
    data = _resolve(path, sources, [], cwd)
    for item in sets:
        assignment, origin = item if isinstance(item, tuple) else (item, f"--set {item}")
        key, value = parse_set(assignment)
        apply_set(data, key, value, sources, origin)
    profile = build(Profile, data, sources)
    _check_consistency(profile, sources)
    return LoadedProfile(name=path.stem, source=str(path), profile=profile)


def _check_container_without_runtime(p: Profile, sources: Sources) -> None:
    """An image or binds with no runtime named: the job would run on the host, silently.
    A runtime = "none" written out (say over an inherited image) is meant."""
    if p.container.runtime != "none" or sources.given("container.runtime"):
        return
    for key in ("image", "binds", "workdir", "home", "options"):
        if getattr(p.container, key):
            raise ConfigError(sources.of(f"container.{key}"), f"container.{key}",
                              "is set, but container.runtime is not, so the job would run without a container: "
                              'set container.runtime ("apptainer", "singularity" or "pyxis"), or runtime = "none" '
                              "to run on the host")


# apptainer/singularity options that keep the job's environment out of the container.
_CLEAN_ENV = {"--cleanenv", "-e", "--containall", "-C"}


def _check_clean_environment(p: Profile, sources: Sources) -> None:
    """--cleanenv (-e, --containall): the ranks would not get SLURMTRAIN_RUN_DIR, the stop
    file, the launcher's rank variables: the trainer checkpoints elsewhere, status sees no
    heartbeat, doctor fails, all silently (seen on the container lane). Refused, with the
    way to keep host variables out of the program that works."""
    if p.container.runtime not in ("apptainer", "singularity"):
        return
    bad = [o for o in p.container.options if o.split("=", 1)[0] in _CLEAN_ENV]
    if bad:
        raise ConfigError(sources.of("container.options"), "container.options",
                          f"{bad[0]} keeps the job's environment out of the container, and the ranks need it "
                          "(SLURMTRAIN_RUN_DIR, the stop file, the launcher's rank variables, SLURM_*): leave it out; "
                          "container.env sets what the program must see over the host's values")


# InfiniBand verbs fields NCCL hands its values to: the QP timeout is 5 bits (4.096 us x 2^N),
# the retry count 3; a value outside them is not what it says (NCCL's defaults: 20 and 7).
_IB_RANGES = {"NCCL_IB_TIMEOUT": (1, 31), "NCCL_IB_RETRY_CNT": (0, 7)}


def _check_ib_values(p: Profile, sources: Sources) -> None:
    for key, mapping in (("fabric.env", p.fabric.env), ("env.vars", p.env.vars), ("container.env", p.container.env)):
        for var, (low, high) in _IB_RANGES.items():
            value = mapping.get(var)
            if value is not None and not (str(value).isdigit() and low <= int(value) <= high):
                raise ConfigError(sources.of(f"{key}.{var}"), f"{key}.{var}",
                                  f"{value!r} is outside {low}-{high}, the InfiniBand field NCCL gives it to "
                                  "(NCCL's defaults: NCCL_IB_TIMEOUT 20, NCCL_IB_RETRY_CNT 7)")


# Variables the job script or its launcher sets on every node, after the profile's: a
# profile's value would be replaced without a word (a guide's MASTER_PORT=12802 was).
_SET_BY_THE_JOB = {
    "MASTER_PORT": "set launch.rdzv_port instead (the port is it plus the job id modulo launch.rdzv_port_spread)",
    "MASTER_ADDR": "it is the job's first node, which the supervisor exports",
    **{name: "the launcher gives each process its own" for name in
       ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")},
    **{name: "slurmtrain's own, from the profile and the run" for name in
       ("SLURMTRAIN_RUN_DIR", "SLURMTRAIN_STOP_FILE", "SLURMTRAIN_STOP_SIGNAL", "SLURMTRAIN_NNODES",
        "SLURMTRAIN_PROCS_PER_NODE", "SLURMTRAIN_TRACKERS", "SLURMTRAIN_ARRAY_TASK")},
}


def _check_job_variables(p: Profile, sources: Sources) -> None:
    for key, mapping in (("fabric.env", p.fabric.env), ("env.vars", p.env.vars), ("container.env", p.container.env)):
        for var in mapping:
            if var in _SET_BY_THE_JOB:
                raise ConfigError(sources.of(f"{key}.{var}"), f"{key}.{var}",
                                  f"the job sets {var} itself on every node, over this value: {_SET_BY_THE_JOB[var]}")


def _check_fabric(p: Profile, sources: Sources) -> None:
    """Settings the chosen fabric would ignore or contradict, named rather than dropped."""
    _check_ib_values(p, sources)
    _check_job_variables(p, sources)
    f = p.fabric
    if f.gpu_rdma and f.kind != "efa":
        raise ConfigError(sources.of("fabric.gpu_rdma"), "fabric.gpu_rdma",
                          f"only for fabric.kind = \"efa\" (EFA's device RDMA), and kind is {f.kind!r}; "
                          "on InfiniBand NCCL uses GPUDirect RDMA by itself")
    if f.kind != "socket" or sources.given("fabric.kind"):  # written out, "socket" is meant
        return
    for key, mapping in (("fabric.env", f.env), ("env.vars", p.env.vars)):
        for var in mapping:
            if var in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL"):  # which IB devices, how
                raise ConfigError(sources.of(f"{key}.{var}"), f"{key}.{var}",
                                  "an InfiniBand setting, but fabric.kind is not set, and its default \"socket\" "
                                  "turns InfiniBand off (NCCL_IB_DISABLE=1): set fabric.kind = \"ib\"")


def _check_consistency(p: Profile, sources: Sources) -> None:
    """Rules that span fields."""
    if p.launch.launcher not in p.allowed_launchers:
        raise ConfigError(sources.of("launch.launcher"), "launch.launcher",
                          f"launcher {p.launch.launcher!r} is not allowed on this cluster; "
                          f"allowed_launchers: {', '.join(p.allowed_launchers)}")
    if p.container.runtime != "none" and not p.container.image:
        raise ConfigError(sources.of("container.image"), "container.image",
                          f"required when container.runtime is {p.container.runtime!r}; expected an image path or name")
    _check_container_without_runtime(p, sources)
    _check_clean_environment(p, sources)
    if (said := sbatchextra.owned(p.slurm.extra)) is not None:
        raise ConfigError(sources.of("slurm.extra"), "slurm.extra", f"{said[0]}: {said[1]}")
    _check_fabric(p, sources)
    for key, mapping in (("env.vars", p.env.vars), ("container.env", p.container.env), ("fabric.env", p.fabric.env)):
        for var in mapping:
            problem = ENV_NAME(var)
            if problem:
                raise ConfigError(sources.of(f"{key}.{var}"), f"{key}.{var}", problem)
    for secret in p.env.secrets:
        if secret in p.env.vars:
            raise ConfigError(sources.of(f"env.vars.{secret}"), f"env.vars.{secret}",
                              "is listed in env.secrets: a secret is passed through by name, never given a value in a profile")
