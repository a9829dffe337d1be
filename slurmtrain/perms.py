"""Whose a path is, in words, for a refusal a teammate understands: a runs directory a team
shares (one Unix group, every member's umask 002, the setgid bit on the directory) breaks
when one member's files are made 0644 under umask 022, and "Permission denied" alone names
neither the owner nor the fix. A floor module: the standard library only.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Iterable

TEAM_HINT = ("a runs directory a team shares needs group write: every member's umask 002 and the directory's "
             "setgid bit (README: \"A runs directory a team shares\")")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def owner(path: str | os.PathLike) -> str:
    """Who owns ``path`` (a run directory: who submitted it); "" when it cannot be looked at."""
    try:
        return _user(os.stat(path).st_uid)
    except OSError:
        return ""


def me() -> str:
    return _user(os.geteuid())


def _nearest(path: str | os.PathLike) -> tuple[Path, os.stat_result] | None:
    """``path`` or its nearest existing parent, and its stat."""
    p = Path(path)
    for at in (p, *p.parents):
        try:
            return at, at.stat()
        except OSError:
            continue
    return None


def whose(path: str | os.PathLike) -> str:
    """``it is alice's, group mlteam, -rw-r--r--`` of ``path``, or of its nearest existing
    parent (``its folder /x is ...``); "" when nothing of it can be looked at."""
    found = _nearest(path)
    if found is None:
        return ""
    at, st = found
    what = "it is" if at == Path(path) else f"its folder {at} is"
    return f"{what} {_user(st.st_uid)}'s, group {_group(st.st_gid)}, {stat.filemode(st.st_mode)}"


def a_teammates(path: str | os.PathLike) -> bool:
    """``path`` (or its nearest existing parent) is another person's: not this user's, not root's."""
    found = _nearest(path)
    return found is not None and found[1].st_uid not in (0, os.geteuid())


def explain(path: str | os.PathLike) -> str:
    """What a PermissionError on ``path`` meant: whose it is and who asked; for a teammate's
    path, what a shared runs directory needs."""
    said = whose(path)
    said = f"{said}; you are {me()}" if said else f"you are {me()}"
    return f"{said}; {TEAM_HINT}" if a_teammates(path) else said


def can(path: str | os.PathLike, mode: int) -> bool:
    """``os.access`` for the user this process acts as (its effective ids, where the system
    tells them apart)."""
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def unwritable(paths: Iterable[str | os.PathLike]) -> Path | None:
    """The first of ``paths`` that exists and that this user cannot write (a folder: cannot
    make or replace files in)."""
    for p in map(Path, paths):
        if p.exists() and not can(p, os.W_OK | (os.X_OK if p.is_dir() else 0)):
            return p
    return None


def refusal(path: Path, doing: str) -> str:
    """The message that refuses ``doing`` before anything happened, for ``path`` it could
    not write."""
    return f"{path}: not writable by you ({explain(path)}); {doing} would fail half-way, so nothing was done"
