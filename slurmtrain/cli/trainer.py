"""Commands: trainer (to be written)."""

from .base import main  # noqa: F401
