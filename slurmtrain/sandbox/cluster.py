"""``up``, ``down``, ``status``: the sandbox's life cycle."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import config, daemons, hosts, install, netns, procs
from .config import Settings
from .errors import DaemonFailed, SandboxError, SandboxUnavailable
from .layout import Layout
from .. import slurmversion
from ..errors import UsageError

Progress = Callable[[str], None]
NODE_READY_TIMEOUT_S = 60


@dataclass(frozen=True)
class SandboxInfo:
    """A running sandbox: where it lives and how to talk to it."""

    state_dir: Path
    slurm_conf: Path
    settings: Settings
    nodes: tuple[str, ...]
    node_addrs: dict[str, str]
    partitions: tuple[str, ...]
    pids: dict[str, int]
    """daemon name ("munged", "slurmctld", "slurmd-stnode1", ...) -> pid"""
    logs: dict[str, Path]
    node_states: dict[str, str] = field(default_factory=dict)
    """node -> sinfo state ("idle", "alloc", "down*", ...); empty if not queried"""

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.slurm_conf)}


def _daemon_programs(settings: Settings) -> dict[str, str]:
    """daemon name -> program, in start order."""
    names = {"munged": "munged"}
    if settings.accounting:
        names.update({"mariadb": "mariadbd", "slurmdbd": "slurmdbd"})
    names["slurmctld"] = "slurmctld"
    for node in config.node_names(settings):
        names[daemons.slurmd_name(node)] = "slurmd"
    return names


def _saved_settings(layout: Layout) -> Settings | None:
    try:
        return Settings.from_json(layout.settings.read_text())
    except (OSError, ValueError, TypeError):
        return None


def _running(layout: Layout, settings: Settings) -> dict[str, int]:
    """Daemons of ``settings`` that are running now: name -> pid."""
    out = {}
    for name, program in _daemon_programs(settings).items():
        pid = procs.read_pid(layout.pid_file(name))
        if procs.is_ours(pid, program):
            out[name] = pid
    return out


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    path.chmod(mode)
    return True


def _info(layout: Layout, settings: Settings, query_nodes: bool = True) -> SandboxInfo:
    names = _daemon_programs(settings)
    nodes = tuple(config.node_names(settings))
    return SandboxInfo(
        state_dir=layout.root,
        slurm_conf=layout.slurm_conf,
        settings=settings,
        nodes=nodes,
        node_addrs=config.node_addrs(settings, layout),
        partitions=config.PARTITIONS,
        pids=_running(layout, settings),
        logs={name: (layout.log(name)) for name in names},
        node_states=daemons.node_states(layout) if query_nodes else {},
    )


@contextlib.contextmanager
def _exclusive(layout: Layout):
    """One `up` or `down` at a time per state directory. Two at once (two test sessions,
    two shells) each saw the sandbox down and started a slurmctld: the second one died
    on the busy port after overwriting the first one's pid file, and `status` then said
    the running controller was not running."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with open(layout.root / "updown.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up(nodes: int = 2, cpus_per_node: int = 4, accounting: bool = False,
       progress: Progress = print, network: bool = False) -> SandboxInfo:
    """Start the sandbox (or check that it already runs with these settings).

    ``network``: each node in namespaces of its own (netns.py). Raises UsageError if it
    runs with other settings, SandboxUnavailable where this machine cannot run it,
    DaemonFailed naming the daemon and its log otherwise."""
    layout = Layout.current()
    with _exclusive(layout):
        return _up(layout, Settings(nodes=nodes, cpus_per_node=cpus_per_node, accounting=accounting,
                                    network=network), progress)


def revive(progress: Progress = print) -> SandboxInfo:
    """Start again what died of the running sandbox (a node's slurmd killed with its machine),
    with the settings it runs with; Slurm takes the node back in service."""
    layout = Layout.current()
    with _exclusive(layout):
        saved = _saved_settings(layout)
        if saved is None:
            raise UsageError(f"no sandbox in {layout.root} to revive: `slurmtrain sandbox up` starts one")
        return _up(layout, saved, progress)


def _up(layout: Layout, settings: Settings, progress: Progress) -> SandboxInfo:
    accounting = settings.accounting
    install.ensure_installed(accounting, progress)
    if settings.network:
        reason = netns.unavailable_reason()
        if reason:
            raise SandboxUnavailable(reason)

    saved = _saved_settings(layout)
    info = _already_up(layout, saved, settings)
    if info is not None:
        progress(f"sandbox already up ({settings.describe()}); nothing changed")
        return info
    started = time.monotonic()
    progress(f"starting sandbox in {layout.root}: {settings.describe()}")
    layout.make_dirs()
    if saved is not None and saved.nodes != settings.nodes:
        # slurmctld's saved state names the old nodes; start from a clean slate, with job ids
        # the accounting database has not seen (Layout.first_job_id).
        for f in layout.ctld_state.iterdir():
            if f.is_file():
                f.unlink()
        layout.epoch_file.write_text(f"{layout.job_id_epoch + 1}\n")
    _write_files(layout, settings, progress)
    # Written before the daemons start, so a half-started sandbox can still be taken down.
    _write_if_changed(layout.settings, settings.to_json())

    running = _running(layout, settings)

    def start(name: str, fn: Callable[[], int]) -> None:
        if name in running:
            progress(f"{name} already running (pid {running[name]})")
        else:
            progress(f"starting {name}")
            fn()

    names = config.node_names(settings)
    if settings.network and not any(daemons.slurmd_name(n) in running for n in names):
        # Before any daemon: the controller's address is on the bridge, and an address of the
        # subnet without its bridge would go out through the default route.
        progress(f"making {len(names)} networked node(s) on bridge {netns.bridge(layout)}")
        netns.make(layout, names, config.hosts_lines(settings, layout) +
                   [f"{config.controller_addr(settings, layout)} {config.controller_host()}"])
    start("munged", lambda: daemons.start_munged(layout))
    if accounting:
        start("mariadb", lambda: daemons.start_mariadb(layout, progress))
        start("slurmdbd", lambda: daemons.start_slurmdbd(layout))
    start("slurmctld", lambda: daemons.start_slurmctld(layout))
    for node in names:
        start(daemons.slurmd_name(node),
              lambda node=node: daemons.start_slurmd(layout, node, settings.network))
    _wait_nodes_ready(layout, settings, progress)
    progress(f"sandbox up in {time.monotonic() - started:.1f}s; "
             f"use it with: eval \"$(slurmtrain sandbox env)\"")
    return _info(layout, settings)


def _already_up(layout: Layout, saved: Settings | None, settings: Settings) -> SandboxInfo | None:
    """The sandbox, if it runs with ``settings`` and every node is ready; UsageError if it
    runs with others."""
    if saved is None or not _running(layout, saved):
        return None
    if saved != settings:
        raise UsageError(
            f"the sandbox in {layout.root} already runs with {saved.describe()}; "
            f"you asked for {settings.describe()}. Run `slurmtrain sandbox down` first.")
    if len(_running(layout, saved)) < len(_daemon_programs(saved)):
        return None
    info = _info(layout, settings)
    ready = all(s in daemons.READY_STATES for s in info.node_states.values()) and info.node_states
    return info if ready else None


def _write_files(layout: Layout, settings: Settings, progress: Progress) -> None:
    """slurm.conf, cgroup.conf, slurmdbd.conf, and the node names in /etc/hosts."""
    _write_if_changed(layout.slurm_conf, config.slurm_conf(settings, layout))
    _write_cgroup_conf(layout, progress)
    if settings.accounting:
        _write_if_changed(layout.slurmdbd_conf, config.slurmdbd_conf(layout), mode=0o600)
    lines = [] if settings.network else config.hosts_lines(settings, layout)  # networked: each node's own
    if not hosts.resolves(config.controller_host()):
        # Slurm 24.11's controller looks up the name of every client that calls it (and
        # scancel timed out while it retried for 6 s): a container's or chroot's own
        # name must resolve too.
        lines.append(f"127.0.0.1 {config.controller_host()}")
    if lines and hosts.ensure(lines):
        progress(f"added {', '.join(ln.split()[1] for ln in lines)} to {hosts.HOSTS}")


def _write_cgroup_conf(layout: Layout, progress: Progress) -> None:
    """cgroup.conf where this machine's Slurm needs one; none (an old one removed) elsewhere."""
    version = slurmversion.installed(install.which)
    text = config.cgroup_conf(version)
    if text is None:
        layout.cgroup_conf.unlink(missing_ok=True)
    elif _write_if_changed(layout.cgroup_conf, text):
        progress(f"Slurm {slurmversion.text(version)}: wrote {layout.cgroup_conf} (CgroupPlugin=disabled)")


def _wait_nodes_ready(layout: Layout, settings: Settings, progress: Progress) -> None:
    names = config.node_names(settings)
    progress(f"waiting until sinfo shows {len(names)} node(s) idle")
    start = time.monotonic()
    deadline = start + NODE_READY_TIMEOUT_S
    resumed = False
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        for node in names:  # a slurmd that died is the likeliest culprit: name it
            name = daemons.slurmd_name(node)
            if not procs.is_ours(procs.read_pid(layout.pid_file(name)), "slurmd"):
                raise daemons._fail(name, layout.log(name), "it exited after starting")
        states = daemons.node_states(layout)
        if all(states.get(n) in daemons.READY_STATES for n in names):
            return
        not_ready = [n for n in names if states.get(n, "").rstrip("*~#!%$@^-") in ("down", "drain", "drng")]
        if not_ready and not resumed and time.monotonic() > start + 5:
            daemons.resume_nodes(layout, not_ready)  # left down/drained by an earlier run
            resumed = True
        time.sleep(0.5)
    seen = ", ".join(f"{n}={states.get(n, '?')}" for n in names)
    raise DaemonFailed(
        "slurmd", str(layout.logs),
        f"nodes not idle after {NODE_READY_TIMEOUT_S}s (sinfo: {seen}); "
        f"slurmctld log: {layout.log('slurmctld')}")


def _strays(layout: Layout) -> list[int]:
    """slurmstepd and job processes of this sandbox that outlive their slurmd."""
    conf = f"SLURM_CONF={layout.slurm_conf}"
    mine = {os.getpid(), os.getppid()}
    out = []
    for pid in procs.all_pids():
        if pid in mine or not procs.alive(pid):
            continue
        if procs.runs(pid, "slurmstepd") and procs.uses_dir(pid, layout.root):
            out.append(pid)
        elif procs.environ_has(pid, conf) and _has_env_key(pid, "SLURM_JOB_ID"):
            out.append(pid)
    return out


def _has_env_key(pid: int, key: str) -> bool:
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(e.startswith(key.encode() + b"=") for e in data.split(b"\0"))


def _cancel_jobs(layout: Layout, progress: Progress) -> None:
    """Cancel every job first, so slurmctld saves no half-finished job and the next
    `up` starts with idle nodes. Bounded: whatever is left is killed below anyway."""
    if not procs.is_ours(procs.read_pid(layout.pid_file("slurmctld")), "slurmctld"):
        return
    env = daemons.daemon_env(layout)
    try:
        jobs = subprocess.run([install.which("squeue") or "squeue", "-h", "-o", "%i"], env=env,
                              capture_output=True, text=True, timeout=20).stdout.split()
        if not jobs:
            return
        progress(f"cancelling {len(jobs)} job(s)")
        subprocess.run([install.which("scancel") or "scancel", *jobs], env=env,
                       capture_output=True, timeout=20)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = subprocess.run([install.which("squeue") or "squeue", "-h", "-o", "%i"], env=env,
                                  capture_output=True, text=True, timeout=20).stdout.split()
            if not left:
                return
            time.sleep(0.5)
    except subprocess.TimeoutExpired:
        pass


def down(progress: Progress = print) -> list[str]:
    """Stop every daemon the sandbox started (and their job processes); returns their names."""
    layout = Layout.current()
    with _exclusive(layout):
        return _down(layout, progress)


def _down(layout: Layout, progress: Progress) -> list[str]:
    saved = _saved_settings(layout)
    # Every pid file under run/ is one of ours, whatever settings it was started with.
    order = ["slurmctld"]
    if layout.run_dir.is_dir():
        order += sorted(p.stem for p in layout.run_dir.glob("slurmd-*.pid"))
    order += ["slurmdbd", "mariadb", "munged"]
    programs = {"slurmctld": "slurmctld", "slurmdbd": "slurmdbd", "mariadb": "mariadbd", "munged": "munged"}
    _cancel_jobs(layout, progress)
    stopped = []
    for name in order:
        pid = procs.read_pid(layout.pid_file(name))
        program = programs.get(name, "slurmd")
        if procs.is_ours(pid, program):
            progress(f"stopping {name} (pid {pid})")
            left = procs.stop([pid], timeout=20 if name == "mariadb" else 10)
            if left:
                raise SandboxError(f"{name} (pid {pid}) would not stop, even after SIGKILL")
            stopped.append(name)
    strays = _strays(layout)
    if strays:
        progress(f"stopping {len(strays)} leftover job process(es)")
        procs.stop(strays, timeout=5)
    for f in layout.run_dir.glob("*.pid") if layout.run_dir.is_dir() else []:
        f.unlink(missing_ok=True)
    if saved is not None and saved.network:
        netns.remove(layout, config.node_names(saved))
    if saved is not None:
        layout.settings.unlink(missing_ok=True)
    # The /etc/hosts block stays: a sandbox in another state directory may use it.
    progress("sandbox down" if stopped else "sandbox was not running")
    return stopped


def status() -> SandboxInfo | None:
    """The running sandbox, or None if none runs (any of its daemons up counts as running)."""
    layout = Layout.current()
    saved = _saved_settings(layout)
    if saved is None or not _running(layout, saved):
        return None
    return _info(layout, saved)


def is_up() -> bool:
    """True if every daemon of the sandbox runs (cheap: reads pid files, asks nobody)."""
    layout = Layout.current()
    saved = _saved_settings(layout)
    return saved is not None and len(_running(layout, saved)) == len(_daemon_programs(saved))


def slurm_env() -> dict[str, str]:
    """``os.environ`` plus ``SLURM_CONF`` pointing at the sandbox's slurm.conf."""
    return dict(os.environ, SLURM_CONF=str(Layout.current().slurm_conf))
