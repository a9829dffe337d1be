"""Signal handlers that only record. The supervisor's loop takes what came and decides.

A handler runs between two bytecodes of the main thread; if it did more than append,
a decision could be taken twice or half-taken (the bash script's traps did, and most of
its fixes were races between a trap and the code it interrupted). The wake-up fd makes
``wait`` return as soon as a signal arrives, so the loop reacts at once, not at its
next tick.
"""

from __future__ import annotations

import os
import select
import signal
import time


class Signals:
    """The real clock and the real signals: ``now``, ``wait``, ``take``."""

    def __init__(self, signums: list[int]):
        self._got: list[int] = []
        self._r, w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        for s in signums:
            signal.signal(s, self._record)

    def _record(self, signum, frame) -> None:
        self._got.append(signum)

    def take(self) -> list[int]:
        """The signals received since the last call, in order."""
        got, self._got = self._got, []  # one store: a signal recorded meanwhile is in one list or the other
        return got

    @staticmethod
    def now() -> float:
        return time.monotonic()

    @staticmethod
    def wall() -> float:
        """Wall-clock seconds: what file times (the ranks' heartbeats) are compared with."""
        return time.time()

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a signal ends it early."""
        if self._got:
            return
        try:
            ready, _, _ = select.select([self._r], [], [], max(0.0, seconds))
        except InterruptedError:
            return
        if ready:
            try:
                while os.read(self._r, 512):
                    pass
            except BlockingIOError:
                pass
