"""Command-line interface: a thin click layer over the library.

One module per command group; each registers its commands on ``main`` when imported, and
``main`` imports a module only when one of its commands runs (``base.COMMANDS``).
"""

from .base import main

__all__ = ["main"]
