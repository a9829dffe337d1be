"""The runs this user submitted, wherever they were submitted from: a line per run directory
in ``$SLURMTRAIN_STATE_DIR/runs`` (default ``$XDG_STATE_HOME/slurmtrain``, else
``~/.local/state/slurmtrain``). Every run command looks under ``--runs-dir`` (``./runs``)
first; a run not there is looked for here, so ``slurmtrain status 1234`` works from any
directory. Appending a line is all a submission does: a lost or unwritable file loses no run.
"""

from __future__ import annotations

import os
from pathlib import Path

KEEP = 500  # run directories remembered: the file is cut to these when it holds twice as many


def _file() -> Path:
    base = os.environ.get("SLURMTRAIN_STATE_DIR")
    if not base:
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        base = os.path.join(state, "slurmtrain")
    return Path(base) / "runs"


def remember(run_dir: Path) -> None:
    path = _file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(f"{Path(run_dir).absolute()}\n")
        lines = path.read_text().splitlines()
        if len(lines) > 2 * KEEP:
            tmp = path.with_name(path.name + f".{os.getpid()}")
            tmp.write_text("".join(f"{line}\n" for line in lines[-KEEP:]))
            os.replace(tmp, path)
    except OSError:  # a read-only home: the run is where it is, only not found from elsewhere
        pass


def known() -> list[Path]:
    """The remembered run directories that still exist, oldest first, each once (where it
    was remembered last)."""
    try:
        lines = _file().read_text().splitlines()
    except OSError:
        return []
    newest_first = dict.fromkeys(Path(line) for line in reversed(lines) if line.strip())
    return [p for p in reversed(newest_first) if (p / "manifest.json").is_file()]
