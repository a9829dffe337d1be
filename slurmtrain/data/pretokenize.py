"""``slurmtrain tokenize``: raw text -> memory-mappable token shards (format in ``shards.py``).

The work is cut into units that do not depend on the number of processes: one per
compressed or .txt file, and byte ranges of ``unit_bytes`` for plain .jsonl (a line belongs
to the range its first byte lies in). Each unit becomes one shard, so 1 and N processes
write byte-identical shards, and a resumed run skips every shard whose ``.json`` exists.

Documents: a .jsonl line's ``field`` (blank lines and empty texts skipped), a .txt file as
one document: what the trainer's raw-text path reads (``data.read_documents``).
Torch-free: numpy and ``tokenizers``.
"""

from __future__ import annotations

import gzip
import io
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import numpy as np

from ..errors import ConfigError, SlurmtrainError, UsageError
from . import hfdatasets, shards

SUFFIXES = tuple(f"{s}{c}" for s in (".jsonl", ".txt") for c in ("", ".gz", ".zst"))
MAX_SKIPPED_SHOWN = 20
_BATCH = 1024  # documents per encode_batch call

_JSON_KIND = {int: "a number", float: "a number", bool: "true or false", list: "a list", dict: "an object",
              type(None): "null"}  # how JSON calls a value


@dataclass(frozen=True)
class Unit:
    name: str  # shard name
    input: int  # index into the inputs
    path: str
    start: int
    end: int  # -1: to the end (compressed and .txt files)


@dataclass
class Result:
    name: str
    docs: int
    tokens: int
    bytes: int
    n_skipped: int = 0
    skipped: list[str] = field(default_factory=list)


def input_files(inputs: list[Path]) -> list[Path]:
    """The files to read: each INPUT, or the corpus files under it (sorted, as the trainer
    reads a folder)."""
    files: list[Path] = []
    for p in inputs:
        if p.is_dir() and hfdatasets.is_saved_dataset(p):
            hfdatasets.require_pyarrow()  # here, not in every worker
            files += hfdatasets.data_files(p)
        elif p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
            if not found:
                raise UsageError(f"{p} holds no {', '.join(SUFFIXES)} files")
            files += found
        elif p.exists():
            if not p.name.endswith(SUFFIXES):
                raise UsageError(f"{p}: not a corpus file (expected one of {', '.join(SUFFIXES)})")
            files.append(p)
        else:
            raise UsageError(f"no such file or folder: {p}")
    return files


def plan_units(files: list[Path], unit_bytes: int) -> list[Unit]:
    units: list[Unit] = []
    for i, f in enumerate(files):
        size = f.stat().st_size
        if f.name.endswith(".jsonl") and size > unit_bytes:
            ranges = [(s, min(s + unit_bytes, size)) for s in range(0, size, unit_bytes)]
        else:
            ranges = [(0, -1)]
        for s, e in ranges:
            units.append(Unit(f"{len(units):05d}", i, str(f), s, e))
    return units


def _open_binary(path: str) -> io.BufferedIOBase:
    if path.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if path.endswith(".zst"):
        try:
            import zstandard
        except ModuleNotFoundError:
            raise UsageError(f"{path}: reading .zst needs the zstandard package: "
                             "pip install 'slurmtrain[train]'") from None
        raw = open(path, "rb")
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))
    return open(path, "rb")


class _BadLine(Exception):
    pass


def _lines_before(path: str, offset: int) -> int:
    """Newlines in the first ``offset`` bytes: a unit's first line number, counted only when
    a message needs it."""
    n = 0
    with open(path, "rb") as fh:
        while offset > 0:
            block = fh.read(min(offset, 1 << 22))
            if not block:
                break
            n += block.count(b"\n")
            offset -= len(block)
    return n


def read_unit(unit: Unit, text_field: str, skip_bad: bool, res: Result,
              seen: list[int] | None = None) -> Iterator[str]:
    """The unit's documents; a bad line raises (or, with ``skip_bad``, is counted in ``res``).
    ``seen[0]``: bytes of a plain .jsonl read so far (for progress)."""
    seen = seen if seen is not None else [0]
    base: list[int] = []  # line number of the unit's first line, found lazily
    first = [unit.start]  # byte offset of the unit's first line

    def bad(k: int, why: str) -> None:  # the k-th line of the unit
        if not base:
            base.append(_lines_before(unit.path, first[0]) if first[0] else 0)
        where = f"{unit.path}:{base[0] + k}: {why}"
        if not skip_bad:
            raise _BadLine(where)
        res.n_skipped += 1
        if len(res.skipped) < MAX_SKIPPED_SHOWN:
            res.skipped.append(where)

    try:
        if unit.path.endswith(hfdatasets.SUFFIX):  # a file of a datasets save_to_disk folder
            try:
                yield from hfdatasets.read_texts(unit.path, text_field, bad, seen)
            except hfdatasets.NoColumn as err:
                raise _BadLine(str(err)) from None
            res.bytes += os.path.getsize(unit.path)
            return
        with _open_binary(unit.path) as fh:
            if unit.path.endswith(SUFFIXES[3:6]):  # .txt*: the file is one document
                data = fh.read()
                res.bytes += os.path.getsize(unit.path)
                text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
                yield text
                return
            yield from _jsonl_texts(fh, unit, text_field, bad, seen, first)
            res.bytes += (unit.end if unit.end >= 0 else os.path.getsize(unit.path)) - unit.start
    except (OSError, EOFError) as err:  # unreadable, or a broken .gz/.zst
        raise _BadLine(f"{unit.path}: cannot read: {err}") from None
    except Exception as err:  # zstandard.ZstdError does not derive from OSError, nor pyarrow's
        if type(err).__module__.startswith(("zstandard", "pyarrow")):
            raise _BadLine(f"{unit.path}: cannot read: {err}") from None
        raise


def _jsonl_texts(fh: IO[bytes], unit: Unit, text_field: str, bad: Callable[[int, str], None],
                 seen: list[int], first: list[int]) -> Iterator[str]:
    """The documents of a .jsonl unit: the lines that begin in it (``first[0]``: the byte
    offset of its first); ``bad(k, why)`` for the k-th line that is no document."""
    if unit.start:
        fh.seek(unit.start - 1)
        fh.readline()  # the rest of a line that began in the previous unit
    pos, end = fh.tell(), unit.end if unit.end >= 0 else float("inf")
    first[0] = pos
    k, plain = 0, unit.path.endswith(".jsonl")
    while pos < end:
        line = fh.readline()
        if not line:
            break
        k += 1
        pos += len(line)
        if plain:  # a compressed file's position is in decompressed bytes
            seen[0] = pos - unit.start
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8", "replace"))
        except json.JSONDecodeError as err:
            bad(k, f"not JSON ({err.msg}, at character {err.pos + 1} of the line)")
            continue
        if not isinstance(obj, dict) or text_field not in obj:
            bad(k, f'no "{text_field}" field' + ("" if text_field != "text" else " (--field names another)"))
            continue
        text = obj[text_field]
        if not isinstance(text, str):
            bad(k, f'"{text_field}" is {_JSON_KIND.get(type(text), type(text).__name__)}, not a string')
            continue
        if text:
            yield text


_TOK: dict[str, Any] = {}
# Where a unit reports how far it got (name, documents, tokens, bytes) after each batch:
# a queue to the parent in a worker process, the progress display itself in-process.
_REPORT: Callable[[tuple[str, int, int, int]], None] | None = None


def _tokenizer(spec: str) -> Any:
    if spec not in _TOK:
        from .tokenizer import load_tokenizer
        _TOK[spec] = load_tokenizer(None if spec == "bytes" else spec)
    return _TOK[spec]


def tokenize_unit(job: tuple[Unit, str, str, str, bool, str]) -> Result:
    """Tokenize one unit into ``out/shards/<name>.{bin,idx,json}`` (the .json last)."""
    unit, out, tok_spec, text_field, skip_bad, dtype = job
    tok = _tokenizer(tok_spec)
    res = Result(unit.name, 0, 0, 0)
    d = Path(out) / "shards"
    tmp_bin = d / f"{unit.name}.bin.tmp"
    ends: list[int] = []
    seen = [0]
    try:
        with tmp_bin.open("wb") as fh:
            pending: list[str] = []

            def flush() -> None:
                if not pending:
                    return
                flat, lengths = tok.encode_framed(pending, dtype)
                for n in lengths:
                    res.tokens += n
                    ends.append(res.tokens)
                fh.write(flat.tobytes())
                pending.clear()
                if _REPORT is not None:
                    _REPORT((unit.name, len(ends), res.tokens, seen[0]))

            for text in read_unit(unit, text_field, skip_bad, res, seen):
                pending.append(text)
                if len(pending) >= _BATCH:
                    flush()
            flush()
    except _BadLine as err:
        tmp_bin.unlink(missing_ok=True)
        raise SlurmtrainError(str(err)) from None
    res.docs = len(ends)
    os.replace(tmp_bin, d / f"{unit.name}.bin")
    tmp_idx = d / f"{unit.name}.idx.tmp"
    np.asarray(ends, np.int64).tofile(tmp_idx)
    os.replace(tmp_idx, d / f"{unit.name}.idx")
    shards.write_json(d / f"{unit.name}.json", res.__dict__)
    return res


# Workers are forked where the OS can: they inherit the imported modules and the tokenizer
# the parent loaded, where a spawned worker spends ~0.5 s of CPU importing numpy and
# tokenizers and reading tokenizer.json again (measured: 12% of a 2-process run on 8 MB).
# Safe only while the parent has no other thread (the CLI: its tokenizer has encoded nothing,
# and TOKENIZERS_PARALLELISM=false is set before it loads). Called from a process with threads
# (a library user, a test runner with W&B's or torch's threads), a forked worker can inherit a
# lock held by one of them and hang for ever: such callers get spawned workers.
def _start_method() -> str:
    if "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    try:
        alone = len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc: count the Python threads at least
        alone = threading.active_count() == 1
    return "fork" if alone else "spawn"


def _cores() -> int:
    """The cores this process may run on (a Slurm task's allocation, not the whole node)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _init_worker(queue: Any) -> None:
    global _REPORT
    # One process per core: the tokenizer's own thread pool would oversubscribe them.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _REPORT = queue.put


class Progress:
    """A line every ``every`` seconds (rewritten in place on a terminal)."""

    def __init__(self, total_units: int, total_bytes: int, every: float, stream=sys.stderr):
        self.total_units, self.total_bytes, self.every, self.stream = total_units, total_bytes, every, stream
        self.t0 = self.last = time.monotonic()
        self.tty = stream.isatty()
        self.units = self.docs = self.tokens = self.bytes = 0
        self.bytes_before = self.tokens_before = 0  # shards found finished (resume): not in rates
        self.running: dict[str, tuple[int, int, int]] = {}  # unfinished units: docs, tokens, bytes
        self.finished: set[str] = set()

    def partial(self, report: tuple[str, int, int, int]) -> None:
        if report[0] not in self.finished:  # a worker's report may come after its result
            self.running[report[0]] = report[1:]
            self.maybe_show()

    def add(self, r: Result, resumed: bool = False) -> None:
        self.running.pop(r.name, None)
        self.finished.add(r.name)
        self.units += 1
        self.docs += r.docs
        self.tokens += r.tokens
        self.bytes += r.bytes
        if resumed:
            self.bytes_before += r.bytes
            self.tokens_before += r.tokens
        self.maybe_show(force=self.units == self.total_units)

    def maybe_show(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            self.show(now)

    def show(self, now: float) -> None:
        docs, tokens, n_bytes = (self.docs + sum(d for d, _, _ in self.running.values()),
                                 self.tokens + sum(t for _, t, _ in self.running.values()),
                                 self.bytes + sum(b for _, _, b in self.running.values()))
        dt = max(now - self.t0, 1e-9)
        rate = (n_bytes - self.bytes_before) / dt
        left = max(self.total_bytes - n_bytes, 0)
        eta = time.strftime("%H:%M:%S", time.gmtime(left / rate)) if rate > 0 else "?"
        line = (f"tokenize: {self.units}/{self.total_units} shards, {docs:,} documents, "
                f"{tokens:,} tokens, {rate / 1e6:.1f} MB/s, "
                f"{(tokens - self.tokens_before) / dt:,.0f} tokens/s, ETA {eta}")
        if self.tty:
            end = "\n" if self.units == self.total_units else ""
            print("\r" + line, end=end, file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)


class _term_as_exit:
    """SIGTERM (scancel, a preemption) as SystemExit, so that leaving the Pool's block
    terminates the workers instead of leaving them to finish their shard as orphans."""

    def __enter__(self) -> None:
        self._old = signal.getsignal(signal.SIGTERM)
        try:
            signal.signal(signal.SIGTERM, self._exit)
        except ValueError:  # not the main thread: leave the handler alone
            self._old = None

    @staticmethod
    def _exit(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def tokenize_corpus(inputs: list[Path], tokenizer: str, out: Path, *, text_field: str = "text",
                    processes: int | None = None, skip_bad: bool = False,
                    unit_bytes: int = 64 << 20, progress_every: float = 5.0,
                    part: tuple[int, int] | None = None,
                    echo: Callable[[str], None] = print) -> dict[str, Any] | None:
    """Tokenize ``inputs`` into ``out``; returns the index. Resumes a run that stopped.

    ``part = (p, n)``: only the p-th of n contiguous groups of shards (0-based; a task of a
    Slurm job or array); the part that finds every shard done writes the index, the
    others return None. The same call without ``part`` finishes whatever is missing."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        tok = _tokenizer(tokenizer)
    except ConfigError as err:
        raise UsageError(f"{err.source}: {err.message}") from None
    files, unreadable = _readable(input_files(inputs), skip_bad)
    dtype = shards.token_dtype(tok.vocab_size)
    units = plan_units(files, unit_bytes)
    plan = {"format": shards.FORMAT, "version": shards.VERSION, "dtype": dtype,
            "tokenizer": shards.tokenizer_identity(tok), "field": text_field, "unit_bytes": unit_bytes,
            "inputs": [{"path": str(f.resolve()), "size": f.stat().st_size,
                        "mtime": f.stat().st_mtime} for f in files],
            "units": [u.__dict__ for u in units]}
    if _same_plan_done(out, plan):
        echo(f"{out} is complete already")
        return json.loads((out / shards.INDEX).read_text())

    mine = units[part[0] * len(units) // part[1]:(part[0] + 1) * len(units) // part[1]] if part else units
    sizes = [p["size"] for p in plan["inputs"]]
    progress = Progress(len(mine), sum((u.end if u.end >= 0 else sizes[u.input]) - u.start for u in mine),
                        progress_every)
    results = _finished(out, mine, progress)
    if results:
        echo(f"resuming: {len(results)} of {len(mine)} shards done already")
    todo = [(u, str(out), tokenizer, text_field, skip_bad, dtype) for u in mine if u.name not in results]
    results.update(_tokenize_units(todo, processes, progress))
    if part:
        echo(f"part {part[0] + 1} of {part[1]}: shards {mine[0].name if mine else '-'} to "
             f"{mine[-1].name if mine else '-'} done ({len(mine)} of {len(units)})")
        # The last part to finish writes the index. Each part writes its shards' .json
        # before it looks, so the last one sees them all (two that finish together both
        # write the same index, atomically).
        results.update(_finished(out, [u for u in units if u.name not in results]))
        if any(u.name not in results for u in units):
            return None
        echo(f"part {part[0] + 1} of {part[1]}: every shard is done; writing the index")
    return _write_index(out, plan, units, results, unreadable, inputs)


def _readable(files: list[Path], skip_bad: bool) -> tuple[list[Path], list[str]]:
    """(the files this process can read, a line for each it cannot: with ``skip_bad``;
    without, the first stops the run)."""
    readable, unreadable = [], []
    for f in files:
        if os.access(f, os.R_OK):
            readable.append(f)
        elif skip_bad:
            unreadable.append(f"{f}: cannot read: permission denied")
        else:
            raise SlurmtrainError(f"{f}: cannot read: permission denied")
    return readable, unreadable


def _same_plan_done(out: Path, plan: dict[str, Any]) -> bool:
    """Write ``plan.json`` into a new ``out``; in one that has it, refuse another plan, and
    say whether this one is complete (its index written)."""
    (out / "shards").mkdir(parents=True, exist_ok=True)
    plan_file = out / "plan.json"
    if not plan_file.exists():
        shards.write_json(plan_file, plan)
        return False
    before, now = json.loads(plan_file.read_text()), json.loads(json.dumps(plan))
    if before != now:
        done = (out / shards.INDEX).exists()
        raise UsageError(f"{out} holds {'a' if done else 'an unfinished'} tokenization {_plan_change(before, now)}; "
                         + ("choose another --out, or remove it to make this one" if done else
                            "it can be made again only from its own inputs: remove it (`rm -r "
                            f"{out}`) and run this command again, or choose another --out"))
    return (out / shards.INDEX).exists()


def _plan_change(before: dict[str, Any], now: dict[str, Any]) -> str:
    """What differs between two plans, in words: which input changed, or which setting."""
    old = {i["path"]: i for i in before.get("inputs", [])}
    new = {i["path"]: i for i in now.get("inputs", [])}
    changed = sorted(p for p in old.keys() & new.keys() if old[p] != new[p])
    if changed:
        return f"of {changed[0]} as it was before it changed" + (f" (and {len(changed) - 1} more)" if changed[1:] else "")
    if old.keys() != new.keys():
        return "of other input files"
    keys = [k for k in ("tokenizer", "field", "dtype", "unit_bytes", "format", "version") if before.get(k) != now.get(k)]
    return f"with another {', '.join(keys) or 'plan'}"


def _finished(out: Path, units: list[Unit], progress: Progress | None = None) -> dict[str, Result]:
    """The results of the units whose shard is written (by an earlier run, or another part)."""
    results = {}
    for u in units:
        done = out / "shards" / f"{u.name}.json"
        if done.exists():
            results[u.name] = Result(**json.loads(done.read_text()))
            if progress is not None:
                progress.add(results[u.name], resumed=True)
    return results


def _tokenize_units(todo: list[tuple], processes: int | None, progress: Progress) -> dict[str, Result]:
    """Each unit of ``todo`` tokenized, here or in a pool of worker processes, in order: the
    first bad line reported is the first in the corpus, whichever unit finished first."""
    global _REPORT
    results: dict[str, Result] = {}
    n_proc = max(1, min(processes or _cores(), len(todo) or 1))
    if n_proc == 1:
        _REPORT = progress.partial
        try:
            for job in todo:
                results[job[0].name] = r = tokenize_unit(job)
                progress.add(r)
        finally:
            _REPORT = None
        return results
    ctx = multiprocessing.get_context(_start_method())
    queue = ctx.Queue()
    with ctx.Pool(n_proc, initializer=_init_worker, initargs=(queue,)) as pool, _term_as_exit():
        it = pool.imap(tokenize_unit, todo)
        for _ in todo:
            while True:
                while not queue.empty():
                    progress.partial(queue.get())
                try:
                    r = it.next(timeout=0.5)
                    break
                except multiprocessing.TimeoutError:
                    continue
            results[r.name] = r
            progress.add(r)
    return results


def _write_index(out: Path, plan: dict[str, Any], units: list[Unit], results: dict[str, Result],
                 unreadable: list[str], inputs: list[Path]) -> dict[str, Any]:
    """The index of every shard (what the trainer reads), written last."""
    ordered = [results[u.name] for u in units]
    n_docs = sum(r.docs for r in ordered)
    n_skipped = sum(r.n_skipped for r in ordered) + len(unreadable)
    skipped = (unreadable + [s for r in ordered for s in r.skipped])[:MAX_SKIPPED_SHOWN]
    if n_docs == 0:
        raise SlurmtrainError(f"no documents in {', '.join(map(str, inputs))}"
                              + (f" ({n_skipped} bad lines skipped)" if n_skipped else ""))
    index = {k: plan[k] for k in ("format", "version", "dtype", "tokenizer", "field", "inputs")}
    index["shards"] = [{"name": u.name, "input": u.input, "start": u.start, "end": u.end,
                        "docs": r.docs, "tokens": r.tokens} for u, r in zip(units, ordered)]
    index.update(n_docs=n_docs, n_tokens=sum(r.tokens for r in ordered), n_skipped=n_skipped,
                 skipped=skipped)
    shards.write_json(out / shards.INDEX, index)
    return index
