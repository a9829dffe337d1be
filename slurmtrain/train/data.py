"""The corpus: read documents, tokenize, pack into fixed-length sequences, hand each rank its share.

Documents are ``[BOS] tokens [EOS]``, concatenated in file order and cut into sequences of
``max_seq_len + 1`` tokens (inputs and shifted targets). A seeded random subset of them is
held out for evaluation. Training order is a fresh seeded permutation per epoch.

The data position is one number, ``consumed``: training sequences taken so far by all ranks
together. Which sequences rank r gets at step s follows from it alone, so resuming (even with
another world size) continues the exact order, and the checkpoint only stores that number.

Every rank reads and tokenizes the whole corpus. That is fine for corpora of up to a few
hundred MB; bigger ones want pre-tokenized shards (not done yet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ..errors import ConfigError
from .inputs import corpus_files
from .tokenizer import Tokenizer


@dataclass
class PackedCorpus:
    train: np.ndarray  # [n_train, seq_len + 1] int32
    val: np.ndarray  # [n_val, seq_len + 1] int32
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
    stream, n_docs = tokenize(read_documents(corpus_files(path, source)), tok)
    n = len(stream) // (seq_len + 1)
    n_val = 0 if val_fraction == 0 else max(1, round(n * val_fraction))
    if n - n_val < 1:
        raise ConfigError(source, "data.path",
                          f"corpus {path} is too small: {len(stream)} tokens in {n_docs} documents "
                          f"make {n} sequences of {seq_len + 1} tokens, and at least "
                          f"{n_val + 1} are needed (lower data.max_seq_len or add text)")
    seqs = stream[: n * (seq_len + 1)].reshape(n, seq_len + 1)
    is_val = np.zeros(n, bool)
    is_val[np.random.default_rng([seed, 1]).choice(n, n_val, replace=False)] = True
    return PackedCorpus(train=seqs[~is_val], val=seqs[is_val], n_docs=n_docs, n_tokens=len(stream))


class TrainStream:
    """This rank's micro-batches, in a deterministic order that depends only on ``consumed``."""

    def __init__(self, sequences: np.ndarray, seed: int, rank: int, world: int, micro_batch: int):
        self.seqs = sequences
        self.seed, self.rank, self.world, self.micro = seed, rank, world, micro_batch
        self.consumed = 0
        self._perm_epoch, self._perm = -1, np.zeros(0, np.int64)

    def _index(self, g: int) -> int:
        epoch, i = divmod(g, len(self.seqs))
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, 2, epoch]).permutation(len(self.seqs))
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


def val_batches(val: np.ndarray, rank: int, world: int, micro: int, limit: int) -> list[torch.Tensor]:
    """Rank r's share of the held-out sequences: rows r, r + world, ... in micro-batches.
    Every rank gets the same number of batches (a short last share is cut) so that the
    collectives inside the forward pass line up."""
    per_rank = min(len(val) // world // micro, limit)
    mine = val[rank::world][: per_rank * micro]
    return [torch.from_numpy(mine[i * micro:(i + 1) * micro].astype(np.int64)) for i in range(per_rank)]
