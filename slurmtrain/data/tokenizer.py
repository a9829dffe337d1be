"""Tokenizers: a local ``tokenizer.json`` (HF ``tokenizers``), or a byte-level fallback.

The byte-level tokenizer needs no file at all (ids 0..255 are the bytes, then BOS and
EOS), which is what lets ``tiny-demo`` run anywhere without downloading anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..errors import ConfigError
from ..recipes.inputs import tokenizer_file


class Tokenizer(Protocol):
    vocab_size: int
    bos_id: int
    eos_id: int
    name: str

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    def encode_framed(self, texts: Sequence[str], dtype: str) -> tuple[np.ndarray, list[int]]:
        """Every text as ``[BOS] ids [EOS]`` in one array of ``dtype``, and their lengths."""


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255; 256 is BOS, 257 is EOS."""

    vocab_size = 258
    bos_id = 256
    eos_id = 257
    name = "bytes"

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8", "replace"), dtype=np.uint8).astype(np.int32)
                for t in texts]

    def encode_framed(self, texts: Sequence[str], dtype: str) -> tuple[np.ndarray, list[int]]:
        return _framed(self.encode_batch(texts), self.bos_id, self.eos_id, dtype)


# Special-token spellings of the Llama families and GPT-2-style tokenizers, in order of preference.
_BOS = ("<s>", "<|begin_of_text|>", "<|endoftext|>", "<bos>")
_EOS = ("</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>")


class HFTokenizer:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer as _Tok
        try:
            self._tok = _Tok.from_file(str(path))
        except Exception as err:  # the library raises plain Exceptions on bad files
            raise ConfigError(str(path), "data.tokenizer", f"cannot read tokenizer: {err}") from None
        self.name = str(path)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.bos_id = self._special(_BOS, path)
        self.eos_id = self._special(_EOS, path)

    def _special(self, names: Sequence[str], path: Path) -> int:
        for n in names:
            i = self._tok.token_to_id(n)
            if i is not None:
                return i
        raise ConfigError(str(path), "data.tokenizer",
                          f"no BOS/EOS token found (looked for {', '.join(names)})")

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int32) for e in encs]

    def encode_framed(self, texts: Sequence[str], dtype: str) -> tuple[np.ndarray, list[int]]:
        # One list and one conversion for the whole batch: a numpy array per document
        # (encode_batch) costs more than the tokenizer itself on short documents.
        flat: list[int] = []
        lengths = []
        for e in self._tok.encode_batch(list(texts), add_special_tokens=False):
            ids = e.ids
            flat.append(self.bos_id)
            flat += ids
            flat.append(self.eos_id)
            lengths.append(len(ids) + 2)
        return np.array(flat, dtype), lengths


def _framed(docs: list[np.ndarray], bos: int, eos: int, dtype: str) -> tuple[np.ndarray, list[int]]:
    """``[BOS] ids [EOS]`` of every document, one after another, and each one's length."""
    b, e = np.array([bos], dtype), np.array([eos], dtype)
    parts = [x for ids in docs for x in (b, ids.astype(dtype, copy=False), e)]
    return (np.concatenate(parts) if parts else np.zeros(0, dtype)), [len(ids) + 2 for ids in docs]


def load_tokenizer(path: str | None) -> Tokenizer:
    if not path:
        return ByteTokenizer()
    return HFTokenizer(tokenizer_file(path))
