"""Which Slurm a cluster runs, and whether slurmtrain is tested against it (torch-free).

Asked two ways, neither of them ``sinfo -V``: Slurm 24.11's client commands read
slurm.conf even to print their version, and fail without ``SLURM_CONF`` where the
default file does not exist.

- ``installed()``: the daemons on this machine (``slurmctld -V``, else ``slurmd -V``),
  for the sandbox, which writes what each version needs.
- ``of_cluster(env)``: the controller's own (``scontrol show config``'s SLURM_VERSION),
  for the run manifest and ``doctor``: the login node's client may be older.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

Version = tuple[int, int, int]

# Every test of the suite runs on the first; the Slurm-version lane (scripts/slurm_lane.sh)
# runs the torch-free end-to-end tests on the second. README "Slurm versions".
TESTED: tuple[Version, ...] = ((22, 5, 8), (24, 11, 5))

_NUMBER = re.compile(r"\b(\d{2})\.(\d{2})(?:\.(\d+))?")


def parse(text: str | None) -> Version | None:
    """``(24, 11, 5)`` from "slurm-wlm 24.11.5", "slurm 22.05.8", "SLURM_VERSION = 23.02.7"."""
    m = _NUMBER.search(text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def text(version: Version | None) -> str:
    """"24.11.5" (the way Slurm writes it), or "unknown"."""
    if version is None:
        return "unknown"
    return f"{version[0]}.{version[1]:02d}.{version[2]}"


def tested(version: Version) -> bool:
    """Within the release series slurmtrain is tested on (22.05 to 24.11, both included)."""
    return TESTED[0][:2] <= version[:2] <= TESTED[-1][:2]


# Since 24.05 Slurm requeues a job preempted with PreemptMode=REQUEUE by itself when its
# script ends within the GraceTime (NEWS 24.05.0rc1: "assume that job signalled for
# GraceTime was preempted"; the GRACE_PREEMPT bit of the job), and `scontrol requeue`
# leaves that bit set: a job that also asked for its own requeue was started once more
# after it finished. 22.05 to 23.11 end such a job as its script says.
REQUEUES_PREEMPTED_SINCE = (24, 5)


def requeues_preempted(version: Version | None) -> bool:
    """Slurm requeues a preempted job itself when its script ends (see above)."""
    return version is not None and version[:2] >= REQUEUES_PREEMPTED_SINCE


def _ask(cmd: list[str], env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def _which(program: str) -> str | None:
    # Debian keeps the daemons in sbin, which a non-login root shell may not have on PATH.
    return shutil.which(program, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def installed(which=_which) -> Version | None:
    """The version of the Slurm daemons installed on this machine, or None."""
    for program in ("slurmctld", "slurmd"):
        path = which(program)
        if path:
            found = parse(_ask([path, "-V"]))
            if found:
                return found
    return None


def of_cluster(env: dict[str, str] | None = None) -> Version | None:
    """The version the cluster's controller runs (``scontrol show config``), or None."""
    return from_config(config_text(env))


def config_text(env: dict[str, str] | None = None) -> str:
    """The text of ``scontrol show config``; "" where the controller does not answer."""
    return _ask(["scontrol", "show", "config"], env)


def from_config(config: str) -> Version | None:
    """SLURM_VERSION from the text of ``scontrol show config``, or None."""
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SLURM_VERSION":
            return parse(value)
    return None


def warning(version: Version | None) -> str | None:
    """A line for people where ``version`` is outside the tested range, else None."""
    if version is None or tested(version):
        return None
    return (f"Slurm {text(version)} is outside the versions slurmtrain is tested on ({text(TESTED[0])} to "
            f"{text(TESTED[-1])}): submit, stop and requeue may behave differently; please report what breaks")
