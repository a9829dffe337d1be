"""The sandbox's marked block in /etc/hosts, so node names resolve to their loopback addresses."""

from __future__ import annotations

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
