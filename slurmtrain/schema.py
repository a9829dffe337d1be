"""Typed, frozen configuration loaded from TOML, with errors that name file and key.

Cluster profiles and training recipes are trees of frozen dataclasses. ``build``
turns a plain dict (parsed TOML, after ``extends`` and ``--set`` are applied) into
such a tree, checking every key and type. Fields carry their documentation and
optional checks in ``metadata`` through :func:`field`.

Provenance: a :class:`Sources` maps dotted keys to where their value came from
(a file, or ``--set key=value``), so an error names the right origin even after
several files were merged.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any, Callable, Literal, Mapping

from ._toml import tomllib
from .errors import ConfigError

Check = Callable[[Any], "str | None"]  # returns an error text, or None when fine


class Frozen:
    """``repr``, ``==`` and ``hash`` of a frozen dataclass, as ``@dataclass`` writes them,
    defined once. A class takes them with ``@dataclass(frozen=True, repr=False, eq=False)``:
    dataclasses would compile the three again for each class at import, about a third of
    the profile module's import time, which every ``gen`` pays."""

    __slots__ = ()

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._compared() == other._compared()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._compared())


def field(doc: str, default: Any = dataclasses.MISSING, *, check: Check | None = None,
          factory: Callable[[], Any] | None = None, int_as_text: bool = False) -> Any:
    """A dataclass field with a one-line doc (feeds ``--help`` and ``profiles show``);
    ``int_as_text``: a text field that takes a whole number as its text."""
    meta = {"doc": doc, "check": check, "int_as_text": int_as_text}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class Sources:
    """Where each dotted key's value came from; the nearest known parent wins."""

    def __init__(self, default: str):
        self.default = default
        self._by_key: dict[str, str] = {}

    def record(self, data: Mapping[str, Any], source: str, prefix: str = "") -> None:
        for k, v in data.items():
            key = f"{prefix}{k}"
            self._by_key[key] = source
            if isinstance(v, dict):
                self.record(v, source, key + ".")

    def set(self, key: str, source: str) -> None:
        self._by_key[key] = source

    def given(self, key: str) -> bool:
        """Whether ``key`` itself was set somewhere (a file, --set), not left to its default."""
        return key in self._by_key

    def of_rule(self, key: str, *others: str) -> str:
        """Where a rule across keys was broken: ``key``'s source, and where it is a file, each
        other key's whose value came from elsewhere (a --set, a sweep point), which is what
        made the file's value wrong."""
        mine = self.of(key)
        if mine.startswith("--"):  # the command line's own value: that is the one to look at
            return mine
        elsewhere = [f"{k} from {self.of(k)}" for k in others if self.of(k) != mine]
        return mine + (f" ({'; '.join(elsewhere)})" if elsewhere else "")

    def of(self, key: str) -> str:
        parts = key.split(".")
        while parts:
            found = self._by_key.get(".".join(parts))
            if found:
                return found
            parts.pop()
        # A table made only by a key below it (--set foo.bar=2 makes "foo"): that key's source.
        below = [source for k, source in self._by_key.items() if k.startswith(key + ".")]
        return below[-1] if below else self.default


# ---------------------------------------------------------------- value checks

def no_control_chars(value: Any) -> str | None:
    """Every string: a newline or control character is never valid in a field."""
    if isinstance(value, str) and re.search(r"[\x00-\x1f\x7f]", value):
        bad = re.search(r"[\x00-\x1f\x7f]", value).group()
        return f"must not contain control characters such as {bad!r}, got {value!r}"
    return None


def positive(value: Any) -> str | None:
    if value == float("inf"):  # TOML's `inf`: no key means "never" that way (a cadence divided by it fails)
        return f"expected a finite positive number, got {value!r}"
    return None if value > 0 else f"expected a positive number, got {value!r}"


def non_negative(value: Any) -> str | None:
    if value == float("inf"):
        return f"expected a finite number, zero or more, got {value!r}"
    return None if value >= 0 else f"expected zero or more, got {value!r}"


def matches(pattern: str, what: str) -> Check:
    def check(value: Any) -> str | None:
        # re compiles the pattern at its first use and keeps it: importing a schema compiles none.
        return None if re.fullmatch(pattern, value) else f"expected {what}, got {value!r}"
    return check


ENV_NAME = matches(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")


# ---------------------------------------------------------------- type conversion

def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_describe(a) for a in inner)
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])[2:]}s".replace("a list of n ", "a list of ")
    if origin is dict:
        return f"a table of {_describe(typing.get_args(tp)[1])[2:]}s"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return str(tp)


def _found(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "list", dict: "table"}.get(type(value), type(value).__name__)
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)  # as written in TOML
    shown = text if len(text) <= 60 else text[:57] + "..."
    return f"{kind} {shown}"


def _env_number(item: Any, value: Any) -> Any:
    """A whole number in a table of strings (``OMP_NUM_THREADS = 8`` in an env table) is
    its text, as a shell would have it; true/false and fractions stay refused (which text?)."""
    return str(value) if item is str and isinstance(value, int) and not isinstance(value, bool) else value


def _convert(tp: Any, value: Any, key: str, sources: Sources) -> Any:
    def fail(expected: str) -> ConfigError:
        return ConfigError(sources.of(key), key, f"expected {expected}, got {_found(value)}")

    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise fail("a table")
        return build(tp, value, sources, key + ".")
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1:  # Optional[X]: TOML has no null, so the value must be an X
            return _convert(inner[0], value, key, sources)
        for option in inner:
            try:
                return _convert(option, value, key, sources)
            except ConfigError:
                continue
        raise fail(_describe(tp))
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) is type(choices[0]):
            return value
        hint = _near(value, [str(c) for c in choices]) if isinstance(value, str) else ""
        raise fail(_describe(tp) + hint)
    if origin is tuple:
        if isinstance(value, str):  # one item given bare: how a list is written
            import json  # only here: not on gen's path otherwise
            raise fail(f"{_describe(tp)} (a list is written [{json.dumps(value)}]; in --set, quote it for the shell: "
                       f"--set '{key}=[{json.dumps(value)}]')")
        if not isinstance(value, list):
            raise fail(_describe(tp))
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v, f"{key}[{i}]", sources) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise fail(_describe(tp))
        item = typing.get_args(tp)[1]
        return {k: _convert(item, _env_number(item, v), f"{key}.{k}", sources) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise fail("true or false")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail("a number")
        value = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise fail("a string")
    else:  # pragma: no cover - a schema bug, not a user error
        raise TypeError(f"unsupported field type {tp!r} at {key}")
    problem = no_control_chars(value)
    if problem:
        raise ConfigError(sources.of(key), key, problem)
    return value


def _near(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def build(cls: type, data: Mapping[str, Any], sources: Sources, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``, raising ConfigError on the first problem."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for k in data:
        if k not in known:
            key = f"{prefix}{k}"
            valid = ", ".join(sorted(known))
            raise ConfigError(sources.of(key), key,
                              f"unknown key{_near(str(k), list(known))}; valid keys here: {valid}")
    kwargs = {}
    for name, f in known.items():
        key = f"{prefix}{name}"
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(sources.of(key), key,
                                  f"required value is missing; expected {_describe(hints[name])}")
            continue
        raw = data[name]
        if f.metadata.get("int_as_text") and isinstance(raw, int) and not isinstance(raw, bool):
            raw = str(raw)  # slurm.time = 48: Slurm's minutes, as "48"
        if raw == "" and f.default is None:  # TOML has no null: "" unsets (a parent profile's account)
            kwargs[name] = None
            continue
        value = _convert(hints[name], raw, key, sources)
        check = f.metadata.get("check")
        if check is not None and value is not None:
            items = value if isinstance(value, tuple) else (value,)
            for v in items:
                problem = check(v)
                if problem:
                    raise ConfigError(sources.of(key), key, problem)
        kwargs[name] = value
    return cls(**kwargs)


# ---------------------------------------------------------------- --set and merging

def parse_set(assignment: str) -> tuple[str, Any]:
    """``a.b=value`` -> ("a.b", value). The value is read as TOML when it parses
    (``8``, ``true``, ``["x"]``, ``"quoted"``), else taken as a plain string."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key or not re.fullmatch(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*", key):
        raise ConfigError(f"--set {assignment}", key or "(empty)",
                          "expected dotted.key=value, for example --set slurm.nodes=4")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def apply_set(data: dict, key: str, value: Any, sources: Sources, origin: str) -> None:
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(origin, ".".join(parts[: i + 1]),
                              f"is {_found(nxt)}, not a table, so {key} cannot be set")
        node = nxt
    node[parts[-1]] = value
    sources.set(key, origin)


def merge(base: dict, over: Mapping[str, Any]) -> dict:
    """Deep-merge ``over`` into a copy of ``base``: tables merge, everything else replaces."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def docs(cls: type, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(dotted key, doc, default) for every leaf field; used by help and docs."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(docs(tp, f"{prefix}{f.name}."))
        else:
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            rows.append((f"{prefix}{f.name}", f.metadata.get("doc", ""), default))
    return rows


def to_toml(obj: Any) -> str:
    """Write a dataclass tree as TOML (sections of scalars, lists and inline tables)."""
    top, sections = [], []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            body = "".join(f"{f2.name} = {toml_value(getattr(value, f2.name))}\n"
                           for f2 in dataclasses.fields(value) if getattr(value, f2.name) is not None)
            sections.append(f"[{f.name}]\n{body}")
        elif value is not None:
            top.append(f"{f.name} = {toml_value(value)}\n")
    return "".join(top) + ("\n" if top else "") + "\n".join(sections)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_value(k)
