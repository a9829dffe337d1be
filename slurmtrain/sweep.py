"""Sweeps: many points of one job as one Slurm array job (``submit --sweep``).

A point is an ordered mapping ``key -> value``. ``--sweep KEY=V1,V2`` options multiply
(the product, in the order given); ``--sweep-file`` lists points (TOML ``[[point]]``
tables, or JSON Lines: one object per line). Task ``i`` of the array runs point ``i``
in its own run directory, ``<sweep run>/points/<label>/`` (the label names the values).

For the built-in trainer the keys are recipe keys (``train.lr``): each point is applied
as ``--set`` (``$SLURMTRAIN_SWEEP_SETS``) and every point's recipe is checked before
anything is queued. For a user's command the keys are free names: ``{key}`` in the
command becomes the point's value, and every point exports ``SLURMTRAIN_SWEEP_<KEY>``.

Pure and torch-free: parsing, labels and the shell fragments the job script needs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from ._toml import tomllib
from .errors import ConfigError, UsageError
from .shellwords import escape_in_double_quotes

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.\-]*)\}")


@dataclass(frozen=True)
class Point:
    """The values as the user wrote them (text): ``--set`` reads them as it reads its own
    (``3e-4`` a float, ``adamw`` a string), a command gets them unchanged."""
    values: tuple[tuple[str, str], ...]   # (key, value), in the sweep's key order
    origin: str = field(default="", compare=False)  # where a --sweep-file wrote it: "points.toml [[point]] 2"

    @property
    def label(self) -> str:
        """A folder name that says the values: ``lr=3e-4_global_batch_size=256``."""
        short = [key.rsplit(".", 1)[-1] for key, _ in self.values]
        # two keys of one name in different sections (train.seed, data.seed) keep their sections
        parts = [f"{name if short.count(name) == 1 else key}={value}"
                 for name, (key, value) in zip(short, self.values)]
        return re.sub(r"[^A-Za-z0-9_.=+\-]", "-", "_".join(parts))[:200] or "point"

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)


def _text(value: Any) -> str:
    """A value of a sweep file as text: TOML's and JSON's numbers and booleans as TOML writes them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def env_name(key: str) -> str:
    """``train.lr`` -> ``SLURMTRAIN_SWEEP_TRAIN_LR``."""
    return "SLURMTRAIN_SWEEP_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def from_options(sweeps: tuple[str, ...]) -> list[Point]:
    """``--sweep KEY=V1,V2,...`` options, multiplied in the order given."""
    axes: list[tuple[str, list[Any]]] = []
    for option in sweeps:
        key, sep, raw = option.partition("=")
        key = key.strip()
        where = f"--sweep {option}"
        if not sep or not _KEY.fullmatch(key):
            raise ConfigError(where, key or "(empty)", "expected KEY=V1,V2,..., for example --sweep train.lr=1e-4,3e-4")
        values = [v.strip() for v in raw.split(",")]
        if not any(values):
            raise ConfigError(where, key, "no values: give one or more, separated by commas")
        if not all(values):  # "1e-3,,2e-3": a value lost to a typo, or a trailing comma
            raise ConfigError(where, key, "an empty value between commas: remove the extra comma")
        if key in (k for k, _ in axes):
            raise ConfigError(where, key, "given twice: list all its values in one --sweep")
        axes.append((key, values))
    return [Point(tuple(zip([k for k, _ in axes], combo))) for combo in product(*(v for _, v in axes))]


def from_file(path: Path) -> list[Point]:
    """``--sweep-file``: TOML with ``[[point]]`` tables, or JSON Lines (one object a line)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise UsageError(f"--sweep-file {path}: {err.strerror or err}") from None
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(str(path), "", f"not TOML: {err}") from None
        rows = data.get("point", [])
        if not rows and data:
            raise ConfigError(str(path), "", f"no [[point]] tables (the file has: {', '.join(data)}); each point "
                              "is a [[point]] table of KEY = value")
        where = [f"{path} [[point]] {i + 1}" for i in range(len(rows))]
    else:
        rows, where = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as err:
                    raise ConfigError(f"{path}:{n}", "", f"not a JSON object: {err} (a file not named .toml is read "
                                      "as JSON Lines: one object a line)") from None
                if isinstance(rows[-1], list):
                    raise ConfigError(f"{path}:{n}", "", "a JSON array: the file is JSON Lines, one point object "
                                      "a line (or a .toml file of [[point]] tables)")
                where.append(f"{path}:{n}")
    points = []
    for row, at in zip(rows, where):
        if not isinstance(row, dict) or not row:
            raise ConfigError(at, "", "a point is a table (object) of one or more KEY = value")
        row = _flat(row)  # TOML's train.lr = 1e-3 (and JSON's {"train": {"lr": ...}}) is the key train.lr
        for key in row:
            if not _KEY.fullmatch(key):
                raise ConfigError(at, key, "not a key: letters, digits, '_', '-', dotted")
        points.append(Point(tuple((k, _text(v)) for k, v in row.items()), at))
    return points


def _flat(row: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def points_of(sweeps: tuple[str, ...], file: Path | None) -> list[Point]:
    """The sweep's points from its options (both may not be given); [] when neither is."""
    if sweeps and file is not None:
        raise UsageError("give either --sweep options or --sweep-file, not both")
    points = from_file(file) if file is not None else from_options(sweeps) if sweeps else []
    if (sweeps or file is not None) and not points:
        raise ConfigError(str(file), "", "no points in the file")
    where = str(file) if file else "--sweep"
    values = [p.values for p in points]
    twice = sorted({p.label for p in points if values.count(p.values) > 1})
    if twice:
        raise ConfigError(where, "", f"the same point twice: {', '.join(twice)}")
    by_label: dict[str, Point] = {}
    for p in points:
        other = by_label.setdefault(p.label, p)
        if other is not p:  # values that differ only where a folder name cannot: "a/b", "a-b"
            raise ConfigError(where, "", f"two points would share the run directory points/{p.label} "
                              f"({_said(other)} and {_said(p)}): make the values differ in letters, digits or . = + -")
    return points


def _said(point: Point) -> str:
    return " ".join(f"{k}={v}" for k, v in point.values)


def check_placeholders(command: tuple[str, ...], points: list[Point]) -> None:
    """Every ``{key}`` in the command names a key each point has."""
    for word in command:
        for key in PLACEHOLDER.findall(word):
            missing = [p.label for p in points if key not in p.as_dict()]
            if missing:
                raise ConfigError(f"the command's {{{key}}}", key,
                                  f"no such sweep key in point(s) {', '.join(missing[:3])}: the keys are "
                                  + ", ".join(sorted({k for p in points for k in p.as_dict()})))


def warnings(command: tuple[str, ...], points: list[Point], sets: tuple[str, ...]) -> list[str]:
    """What the sweep does not do that it looks like it does: a key a command of one's own
    never names (every point runs the same command; the program may read the variable),
    a key a ``--set`` gives too (the point's value wins)."""
    keys = list(dict.fromkeys(k for p in points for k in p.as_dict()))
    out = []
    if command:
        named = {key for word in command for key in PLACEHOLDER.findall(word)}
        out += [f"sweep key {key} is not in the command as {{{key}}}: every point runs the same command, with "
                f"${env_name(key)} its only difference" for key in keys if key not in named]
    given = {kv.split("=", 1)[0].strip(): kv for kv in sets if isinstance(kv, str)}
    out += [f"--set {given[key]}: the sweep's {key} replaces it in every point" for key in keys if key in given]
    return out


def shell_word(word: str) -> str:
    """A command word with ``{key}`` placeholders as one double-quoted shell word that
    expands the point's variables on the node."""
    out, last = ['"'], 0
    for m in PLACEHOLDER.finditer(word):
        out.append(escape_in_double_quotes(word[last:m.start()]) + "${" + env_name(m[1]) + "}")
        last = m.end()
    out.append(escape_in_double_quotes(word[last:]) + '"')
    return "".join(out)


def sets_text(point: Point) -> str:
    """The point as ``--set`` lines for the trainer (``$SLURMTRAIN_SWEEP_SETS``)."""
    return "\n".join(f"{key}={value}" for key, value in point.values)
