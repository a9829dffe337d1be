"""Commands: watch, plot, demo-corpus (to be written)."""

from .base import main  # noqa: F401
