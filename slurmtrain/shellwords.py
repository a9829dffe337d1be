"""Words of a shell line: what slurmtrain writes itself (``Raw``: "$MASTER_ADDR", never
quoted) and what comes from the user (quoted). A floor module: render.py and the
launchers build their lines with it."""

from __future__ import annotations

import re
import shlex


class Raw(str):
    """A shell fragment written by slurmtrain itself, never quoted (e.g. "$MASTER_ADDR")."""


# $NAME or ${NAME}: a variable of the job's environment, as in a hand-written script.
_REFERENCE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")


def referenced(text: str) -> list[str]:
    """The names ``text``'s ``$NAME`` and ``${NAME}`` references expand on the nodes."""
    return [m.group(0).strip("${}") for m in _REFERENCE.finditer(text)]


def expanding(text: str) -> str:
    """A profile's value whose ``$USER``, ``${SLURM_SUBMIT_DIR}``... (and a leading ``~/``)
    the shell expands where the line runs, and nothing else (no ``$(...)``, no backquotes,
    no globs): the text around each reference quoted, the reference in double quotes."""
    if text == "~" or text.startswith("~/"):  # as the shell does at a word's start: the user's home there
        rest = expanding(text[1:]) if len(text) > 1 else ""
        return Raw('"${HOME}"' + (rest if isinstance(rest, Raw) else shlex.quote(rest) if rest else ""))
    if not _REFERENCE.search(text):
        return text
    out, last = [], 0
    for m in _REFERENCE.finditer(text):
        if m.start() > last:
            out.append(shlex.quote(text[last:m.start()]))
        out.append('"${%s}"' % m.group(0).strip("${}"))
        last = m.end()
    if last < len(text):
        out.append(shlex.quote(text[last:]))
    return Raw("".join(out))


# ${NAME:-default}, ${NAME%x}, $(...), `...`: a shell's, which a profile's value does not get
# (it stays text).
_SHELL_FORM = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*[^A-Za-z0-9_}]|\$\(|`")


def shell_form(text: str) -> str | None:
    """The part of a profile's value that only a shell would expand, where there is one."""
    m = _SHELL_FORM.search(text)
    if m and m.group(0) == "`":
        return text[m.start():text.find("`", m.start() + 1) + 1 or len(text)]
    return text[m.start():text.find("}", m.start()) + 1 or len(text)] if m else None


def inside_double_quotes(text: str) -> str:
    """``text`` for the inside of a double-quoted word, its ``$NAME`` references expanding and
    nothing else (one word where several would read as "A"B"C" to shellcheck, SC2140)."""
    out, last = [], 0
    for m in _REFERENCE.finditer(text):
        out.append(escape_in_double_quotes(text[last:m.start()]))
        out.append("${%s}" % m.group(0).strip("${}"))
        last = m.end()
    return "".join(out) + escape_in_double_quotes(text[last:])


def escape_in_double_quotes(text: str) -> str:
    """``text`` inside a double-quoted word, as it is (no expansion)."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


def shell_words(words) -> str:
    return " ".join(w if isinstance(w, Raw) else shlex.quote(str(w)) for w in words)
