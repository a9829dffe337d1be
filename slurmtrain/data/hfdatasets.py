"""Folders written by Hugging Face ``datasets`` (``Dataset.save_to_disk``) as tokenize input.

Such a folder holds ``state.json`` (its ``_data_files`` name the data files, in order) and
those files: Arrow IPC streams, one record batch after another. They are read here with
``pyarrow`` (which ``datasets`` itself is built on), batch by batch, so memory does not grow
with the file; ``datasets`` is not needed. Each file is one unit of work (one shard), and a
row's text column is one document, in the dataset's row order.

A ``DatasetDict`` folder (``dataset_dict.json``, one folder per split) is refused with the
split folders named: which split is the corpus is the user's choice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

from ..errors import UsageError

SUFFIX = ".arrow"


class NoColumn(Exception):
    pass


def is_saved_dataset(folder: Path) -> bool:
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def data_files(folder: Path) -> list[Path]:
    """The folder's Arrow files, in the dataset's order."""
    if (folder / "dataset_dict.json").is_file():
        splits = json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        raise UsageError(f"{folder} is a DatasetDict (splits {', '.join(splits)}): give one split's "
                         f"folder, e.g. {folder / (splits[0] if splits else 'train')}")
    try:
        state = json.loads((folder / "state.json").read_text())
        files = [folder / f["filename"] for f in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{folder / 'state.json'}: not a datasets save_to_disk state ({err})") from None
    missing = [f for f in files if not f.is_file()]
    if missing or not files:
        raise UsageError(f"{folder / 'state.json'}: data file {missing[0] if missing else '(none)'} is missing")
    return files


def require_pyarrow():
    try:
        import pyarrow.ipc
    except ModuleNotFoundError:
        raise UsageError("reading a datasets save_to_disk folder needs pyarrow: "
                         "pip install 'slurmtrain[datasets]' (or pip install pyarrow)") from None
    return pyarrow


def read_texts(path: str, text_field: str, bad: Callable[[int, str], None],
               seen: list[int]) -> Iterator[str]:
    """The file's texts, row by row (``bad(row, why)`` for a row that is not a string;
    NoColumn when the column is missing); ``seen[0]``: bytes read so far, for progress."""
    pa = require_pyarrow()
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_stream(source)
        if text_field not in reader.schema.names:
            raise NoColumn(f"{path}: no column \"{text_field}\" (columns: {', '.join(reader.schema.names)}; "
                             "--field names the text column)")
        row = 0
        for batch in reader:
            col = batch.column(text_field)
            for text in col.to_pylist():
                row += 1
                if isinstance(text, str):
                    if text:
                        yield text
                else:
                    bad(row, f'"{text_field}" is {"null" if text is None else "a " + type(text).__name__}, '
                             "not a string")
            seen[0] = source.tell()
