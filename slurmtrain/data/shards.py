"""The tokenized-corpus format: what ``slurmtrain tokenize`` writes and the trainer memory-maps.

A tokenized directory holds::

    index.json          written last: the directory is complete when it exists
    plan.json           the work, written first (a resumed run checks it is the same work)
    shards/NNNNN.bin    tokens, uint16 when the vocabulary fits, else uint32;
                        every document is [BOS] ids [EOS]
    shards/NNNNN.idx    int64 end offsets of the documents inside the shard
    shards/NNNNN.json   the shard's counts, written after .bin and .idx (the shard is done)

The corpus is the concatenation of the shards in index order, which is the order of the
input files (and of byte ranges inside a file): the same stream the trainer builds from the
raw files. ``index.json``::

    {"format": "slurmtrain-tokenized", "version": 1, "dtype": "uint16",
     "tokenizer": {"name", "sha256", "vocab_size", "bos_id", "eos_id"},
     "field": "text", "inputs": [{"path", "size", "mtime"}],
     "shards": [{"name", "input", "start", "end", "docs", "tokens"}],
     "n_docs", "n_tokens", "n_skipped", "skipped": ["file:line: reason", ...]}

Torch-free (numpy only): the CLI writes it, the trainer reads it.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

FORMAT = "slurmtrain-tokenized"
VERSION = 1
INDEX = "index.json"


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenizer_identity(tok: Any) -> dict[str, Any]:
    """What identifies a tokenizer: its file's hash (the byte-level one is "bytes")."""
    sha = "bytes" if tok.name == "bytes" else file_sha256(Path(tok.name))
    return {"name": tok.name, "sha256": sha, "vocab_size": tok.vocab_size,
            "bos_id": tok.bos_id, "eos_id": tok.eos_id}


def is_tokenized(path: Path) -> bool:
    """Whether ``path`` is a directory written by ``slurmtrain tokenize`` (complete or not)."""
    return path.is_dir() and ((path / INDEX).is_file() or (path / "plan.json").is_file())


def write_json(path: Path, obj: Any) -> None:
    """Atomically: a reader (or a resumed run) never sees half a file."""
    # The tasks of a tokenize job may write plan.json together, on nodes whose process ids
    # can be the same: the host name keeps their temporary files apart.
    tmp = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def read_index(path: Path, source: str) -> dict[str, Any]:
    idx_file = path / INDEX
    if not idx_file.is_file():
        raise ConfigError(source, "data.path", f"{path} is an unfinished tokenization (no {INDEX}); "
                          "run the same `slurmtrain tokenize` command again to finish it")
    index = json.loads(idx_file.read_text())
    if index.get("format") != FORMAT or index.get("version") != VERSION:
        raise ConfigError(source, "data.path", f"{idx_file}: format {index.get('format')} version "
                          f"{index.get('version')}; this slurmtrain reads {FORMAT} version {VERSION}")
    return index


_WINDOW = 2 << 20  # the kernel maps page-cache pages around a fault within 2 MB-aligned windows


class ShardTokens:
    """The corpus's token stream, memory-mapped shard by shard: slicing reads only the pages
    the slice touches, so memory does not grow with the corpus."""

    def __init__(self, path: Path, index: dict[str, Any]):
        self._dtype = np.dtype(index["dtype"])
        shards = [s for s in index["shards"] if s["tokens"]]
        self._mmaps = []
        for s in shards:
            with (path / "shards" / f"{s['name']}.bin").open("rb") as fh:
                self._mmaps.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        self._maps = [np.frombuffer(m, self._dtype, count=s["tokens"])
                      for m, s in zip(self._mmaps, shards)]
        self._starts = np.cumsum([0] + [s["tokens"] for s in shards])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, sl: slice) -> np.ndarray:
        start, stop, _ = sl.indices(len(self))
        out = np.empty(max(0, stop - start), np.int32)
        k = int(np.searchsorted(self._starts, start, side="right")) - 1
        pos = start
        while pos < stop:  # a sequence may straddle shards
            lo = pos - int(self._starts[k])
            take = min(stop - pos, len(self._maps[k]) - lo)
            out[pos - start:pos - start + take] = self._maps[k][lo:lo + take]
            self._release(k, lo, take)
            pos += take
            k += 1
        return out

    def _release(self, k: int, lo: int, n: int) -> None:
        """Unmap what was just read (the data stays in the page cache). A rank reads
        sequences at random places and the kernel maps large folios (measured: 1.6 MB per
        sequence read) around each; left mapped, they count in the process's RSS, which
        would grow with the part of the corpus trained on."""
        m = self._mmaps[k]
        if not hasattr(m, "madvise"):
            return
        a = lo * self._dtype.itemsize // _WINDOW * _WINDOW
        b = min(-(-(lo + n) * self._dtype.itemsize // _WINDOW) * _WINDOW, len(m))
        m.madvise(mmap.MADV_DONTNEED, a, b - a)
