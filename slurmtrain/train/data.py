"""The corpus: read documents, tokenize, pack into fixed-length sequences, hand each rank its share.

Documents are ``[BOS] tokens [EOS]``, concatenated in file order and cut into sequences of
``max_seq_len + 1`` tokens (inputs and shifted targets). A seeded random subset of them is
held out for evaluation. Training order is a fresh seeded permutation per epoch.

The data position is one number, ``consumed``: training sequences taken so far by all ranks
together. Which sequences rank r gets at step s follows from it alone, so resuming (even with
another world size) continues the exact order, and the checkpoint only stores that number.

Two sources give the same token stream: raw .jsonl/.txt files, which every rank reads and
tokenizes whole into memory (fine up to a few hundred MB; a warning above ``RAW_WARN_BYTES``),
and a folder written by ``slurmtrain tokenize`` (``shards.py``), memory-mapped, so a rank
reads only the sequences it trains on. Sequences, the held-out split and the order are
decided from the token count alone, so both sources train on the same sequences in the same
order for the same seed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ..errors import ConfigError
from ..data import shards
from ..recipes.inputs import corpus_files
from ..data.tokenizer import Tokenizer

log = logging.getLogger("slurmtrain.train")
RAW_WARN_BYTES = 1 << 30  # raw corpora bigger than this get a pointer to `slurmtrain tokenize`


class Sequences:
    """Some of the corpus's sequences of ``seq_len + 1`` tokens: ``seqs[rows]`` is an int32
    array [len(rows), seq_len + 1]. Sequence k is tokens[k * (seq_len + 1):][:seq_len + 1] of
    the stream; which k belong here is ``ids`` (an array), or every k not in the sorted
    ``excluded`` (the training set: stored as the few held-out ids, not the many others)."""

    def __init__(self, tokens, seq_len: int, n: int, ids: np.ndarray | None = None,
                 excluded: np.ndarray | None = None):
        self.tokens, self.width = tokens, seq_len + 1
        self.ids = ids
        self._excl = excluded if excluded is not None else np.zeros(0, np.int64)
        # the j-th kept id is j + (number of excluded ids e_i with e_i - i <= j)
        self._shift = self._excl - np.arange(len(self._excl))
        self._len = len(ids) if ids is not None else n - len(self._excl)

    def __len__(self) -> int:
        return self._len

    def seq_id(self, j: int) -> int:
        if self.ids is not None:
            return int(self.ids[j])
        return j + int(np.searchsorted(self._shift, j, side="right"))

    def __getitem__(self, rows) -> np.ndarray:
        out = np.empty((len(rows), self.width), np.int32)
        for i, j in enumerate(rows):
            k = self.seq_id(int(j))
            out[i] = self.tokens[k * self.width:(k + 1) * self.width]
        return out

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.width)


@dataclass
class PackedCorpus:
    train: Sequences
    val: Sequences
    n_docs: int
    n_tokens: int


def read_documents(files: list[Path]) -> Iterator[str]:
    for f in files:
        if f.suffix != ".jsonl":
            yield f.read_text(encoding="utf-8", errors="replace")
            continue
        with f.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ConfigError(f"{f}:{lineno}", "data.path",
                                      'expected a JSON object with a "text" field') from None
                if isinstance(text, str) and text:
                    yield text


def tokenize(docs: Iterator[str], tok: Tokenizer, batch: int = 1024) -> tuple[np.ndarray, int]:
    """All documents as one stream of ``[BOS] ids [EOS]``; returns (stream, document count)."""
    bos, eos = np.array([tok.bos_id], np.int32), np.array([tok.eos_id], np.int32)
    parts: list[np.ndarray] = []
    n_docs = 0
    pending: list[str] = []

    def flush() -> None:
        for ids in tok.encode_batch(pending):
            parts.extend((bos, ids, eos))
        pending.clear()

    for d in docs:
        pending.append(d)
        n_docs += 1
        if len(pending) >= batch:
            flush()
    flush()
    stream = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return stream, n_docs


def load_corpus(path: Path, tok: Tokenizer, seq_len: int, val_fraction: float, seed: int,
                source: str) -> PackedCorpus:
    if shards.is_tokenized(path):
        index = shards.read_index(path, source)
        check_tokenizer(index, tok, path, source)
        stream, n_docs = shards.ShardTokens(path, index), index["n_docs"]
    else:
        files = corpus_files(path, source)
        size = sum(f.stat().st_size for f in files)
        if size > RAW_WARN_BYTES:
            log.warning("data: %s is %.1f GB of raw text, which every rank tokenizes into memory at "
                        "every start; tokenize it once with `slurmtrain tokenize` and set data.path "
                        "to the result", path, size / 1e9)
        stream, n_docs = tokenize(read_documents(files), tok)
    n = len(stream) // (seq_len + 1)
    n_val = 0 if val_fraction == 0 else max(1, round(n * val_fraction))
    if n - n_val < 1:
        raise ConfigError(source, "data.path",
                          f"corpus {path} is too small: {len(stream)} tokens in {n_docs} documents "
                          f"make {n} sequences of {seq_len + 1} tokens, and at least "
                          f"{n_val + 1} are needed (lower data.max_seq_len or add text)")
    val_ids = np.sort(np.random.default_rng([seed, 1]).choice(n, n_val, replace=False))
    return PackedCorpus(train=Sequences(stream, seq_len, n, excluded=val_ids),
                        val=Sequences(stream, seq_len, n, ids=val_ids),
                        n_docs=n_docs, n_tokens=len(stream))


def check_tokenizer(index: dict, tok: Tokenizer, path: Path, source: str) -> None:
    """The shards were written with the recipe's tokenizer (same file contents)."""
    theirs, ours = index["tokenizer"], shards.tokenizer_identity(tok)
    if theirs["sha256"] != ours["sha256"]:
        raise ConfigError(source, "data.tokenizer",
                          f"{path} was tokenized with {theirs['name']} (sha256 {theirs['sha256'][:12]}), "
                          f"but the recipe's tokenizer is {ours['name']} (sha256 {ours['sha256'][:12]}); "
                          "tokenize again with the recipe's tokenizer, or set data.tokenizer to it")


class TrainStream:
    """This rank's micro-batches, in a deterministic order that depends only on ``consumed``."""

    def __init__(self, sequences: Sequences | np.ndarray, seed: int, rank: int, world: int, micro_batch: int):
        self.seqs = sequences
        self.seed, self.rank, self.world, self.micro = seed, rank, world, micro_batch
        self.consumed = 0
        self._perm_epoch, self._perm = -1, np.zeros(0, np.int64)

    def _index(self, g: int) -> int:
        epoch, i = divmod(g, len(self.seqs))
        if epoch != self._perm_epoch:
            # Generator.permutation(n) is arange(n) (int64) shuffled; shuffling an int32
            # arange draws the same numbers, gives the same order and takes half the memory.
            n = len(self.seqs)
            self._perm = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
            np.random.default_rng([self.seed, 2, epoch]).shuffle(self._perm)
            self._perm_epoch = epoch
        return int(self._perm[i])

    def next_step(self, accum: int) -> list[torch.Tensor]:
        """The ``accum`` micro-batches this rank trains on in the next optimizer step."""
        out = []
        for j in range(accum):
            first = self.consumed + (j * self.world + self.rank) * self.micro
            rows = [self._index(g) for g in range(first, first + self.micro)]
            out.append(torch.from_numpy(self.seqs[rows].astype(np.int64)))
        self.consumed += accum * self.world * self.micro
        return out

    @property
    def epoch(self) -> float:
        return self.consumed / len(self.seqs)

    def state_dict(self) -> dict[str, int]:
        return {"consumed": self.consumed, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.consumed = int(state["consumed"])


def to_device(tokens: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tokens`` on ``device``, queued behind the step's kernels rather than waiting for them.
    A copy to a GPU from pageable memory goes through a staging buffer, and CUDA may wait
    for the stream before it; from pinned (page-locked) memory it is one async DMA. Pinning
    a micro-batch is a host memcpy of a few hundred KB, from torch's caching host allocator."""
    if device.type == "cuda" and not tokens.is_pinned():
        tokens = tokens.pin_memory()
    return tokens.to(device, non_blocking=True)


def val_batches(val: Sequences | np.ndarray, rank: int, world: int, micro: int, limit: int) -> list[torch.Tensor]:
    """Rank r's share of the held-out sequences: rows r, r + world, ... in micro-batches.
    Every rank gets the same number of batches (a short last share is cut) so that the
    collectives inside the forward pass line up."""
    per_rank = min(len(val) // world // micro, limit)
    mine = list(range(len(val)))[rank::world][: per_rank * micro]
    return [torch.from_numpy(val[mine[i * micro:(i + 1) * micro]].astype(np.int64))
            for i in range(per_rank)]
