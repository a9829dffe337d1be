"""A demo corpus from text already on this machine: nothing is downloaded.

Sources, in order: the docstrings of Python's standard library (read with ``ast``, no
module is imported), the licence texts in /usr/share/common-licenses, and the copyright
files and READMEs under /usr/share/doc. English prose and technical text, enough for the
``tiny`` model to learn spelling and common words in a few minutes on a CPU. Torch-free.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import sysconfig
from pathlib import Path
from typing import Iterator


def _stdlib_docstrings() -> Iterator[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts or "tests" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 200:
                    yield doc


def _share_texts() -> Iterator[str]:
    files = sorted(Path("/usr/share/common-licenses").glob("*"))
    doc = Path("/usr/share/doc")
    if doc.is_dir():
        files += sorted(p for p in doc.rglob("*") if p.name in ("copyright", "README", "README.gz",
                                                                "README.md", "README.md.gz"))
    seen: set[int] = set()
    for f in files:
        try:
            raw = f.read_bytes()
            text = (gzip.decompress(raw) if f.suffix == ".gz" else raw).decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        if len(text) >= 200 and hash(text) not in seen:  # many packages share one licence text
            seen.add(hash(text))
            yield text


def write_demo_corpus(out: Path, max_bytes: int) -> tuple[int, int]:
    """Write ``{"text": ...}`` lines to ``out`` (atomically); returns (documents, bytes)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    n_docs = n_bytes = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for source in (_stdlib_docstrings(), _share_texts()):
            for text in source:
                line = json.dumps({"text": text}) + "\n"
                fh.write(line)
                n_docs += 1
                n_bytes += len(line)
                if n_bytes >= max_bytes:
                    break
            if n_bytes >= max_bytes:
                break
    os.replace(tmp, out)
    return n_docs, n_bytes
