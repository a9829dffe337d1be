"""Finding, and where we may, installing the Debian packages the sandbox runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable

from .errors import SandboxUnavailable, SandboxError

# program -> Debian package that ships it
CORE_PROGRAMS = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sinfo": "slurm-client",
    "sbatch": "slurm-client",
    "scontrol": "slurm-client",
}
ACCOUNTING_PROGRAMS = {
    "slurmdbd": "slurmdbd",
    "sacctmgr": "slurm-client",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
}
# Debian keeps daemons in sbin, which a non-login root shell may not have on PATH.
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])


def which(program: str) -> str | None:
    return shutil.which(program, path=_SEARCH_PATH)


def missing_packages(accounting: bool) -> list[str]:
    programs = dict(CORE_PROGRAMS)
    if accounting:
        programs.update(ACCOUNTING_PROGRAMS)
    return sorted({pkg for prog, pkg in programs.items() if which(prog) is None})


def unavailable_reason(accounting: bool = False) -> str | None:
    """Why the sandbox cannot be had on this machine, or None if it can (cheap: runs nothing)."""
    if os.name != "posix" or not os.path.isdir("/proc"):
        return "the sandbox needs Linux"
    if os.geteuid() != 0:
        return "the sandbox runs Slurm's daemons as root; run as root (e.g. in a container or CI)"
    if missing_packages(accounting) and which("apt-get") is None:
        return (f"Slurm is not installed (missing: {', '.join(missing_packages(accounting))}) "
                "and there is no apt-get to install it")
    return None


def ensure_installed(accounting: bool, progress: Callable[[str], None]) -> None:
    """apt-get install whatever is missing; raise SandboxUnavailable if we cannot."""
    reason = unavailable_reason(accounting)
    if reason:
        raise SandboxUnavailable(reason)
    packages = missing_packages(accounting)
    if not packages:
        return
    progress(f"installing {' '.join(packages)} with apt-get (once per machine; takes a minute or two)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SandboxError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{tail}")
    still = missing_packages(accounting)
    if still:
        raise SandboxError(f"apt-get finished but these are still missing: {', '.join(still)}")
