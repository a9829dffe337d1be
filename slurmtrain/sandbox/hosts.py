"""The sandbox's marked block in /etc/hosts, so node names resolve to their loopback addresses."""

from __future__ import annotations

import socket
from pathlib import Path

HOSTS = Path("/etc/hosts")
BEGIN = "# >>> slurmtrain sandbox nodes (managed by `slurmtrain sandbox`) >>>"
END = "# <<< slurmtrain sandbox nodes <<<"


def _without_block(text: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif not inside:
            out.append(line)
    return out


def render(text: str, lines: list[str]) -> str:
    """``text`` with our block replaced by ``lines`` (removed if ``lines`` is empty)."""
    kept = _without_block(text)
    if lines:
        kept += [BEGIN, *lines, END]
    return "\n".join(kept) + "\n"


def resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


def current_block(hosts: Path = HOSTS) -> list[str]:
    """The lines now inside our block."""
    out, inside = [], False
    text = hosts.read_text() if hosts.exists() else ""
    for line in text.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif inside and line.strip():
            out.append(line)
    return out


def ensure(lines: list[str], hosts: Path = HOSTS) -> bool:
    """Add ``lines`` to our block, keeping lines for other names (another sandbox's
    larger node count); returns True if the file changed. Never removes anything:
    node names map to fixed addresses, so a stale line is harmless."""
    names = {ln.split()[1] for ln in lines}
    kept = [ln for ln in current_block(hosts) if ln.split()[1:2] and ln.split()[1] not in names]
    merged = sorted(kept + lines, key=lambda ln: tuple(int(x) for x in ln.split()[0].split(".")))
    return write_block(merged, hosts)


def write_block(lines: list[str], hosts: Path = HOSTS) -> bool:
    """Make our block in ``hosts`` hold ``lines``; returns True if the file changed.

    Written in place rather than replaced: in a container /etc/hosts is often a
    bind mount that cannot be renamed over."""
    old = hosts.read_text() if hosts.exists() else ""
    new = render(old, lines)
    if new == old:
        return False
    with open(hosts, "r+" if hosts.exists() else "w") as f:
        f.seek(0)
        f.write(new)
        f.truncate()
    return True
