"""Command-line interface: a thin click layer over the library.

One module per command group; importing them registers their commands on ``main``.
"""

from .base import main
from . import gen, sandbox, submit, runs, progress, trainer, data, doctor  # noqa: F401  (registration side effects)

__all__ = ["main"]
