"""Words of a shell line: what slurmtrain writes itself (``Raw``: "$MASTER_ADDR", never
quoted) and what comes from the user (quoted). A floor module: render.py and the
launchers build their lines with it."""

from __future__ import annotations

import shlex


class Raw(str):
    """A shell fragment written by slurmtrain itself, never quoted (e.g. "$MASTER_ADDR")."""


def shell_words(words) -> str:
    return " ".join(w if isinstance(w, Raw) else shlex.quote(str(w)) for w in words)
