"""Commands: runs (to be written)."""

from .base import main  # noqa: F401
