"""Bounded exponential backoff with jitter: the one pause every agent loop takes before it asks the API server again.

Every node's agent sees the same API server outage, so retrying at a fixed pace, or in lockstep, would hit a
recovering server with all of them at once; and a request that fails at once, or a watch the server ends as soon as
it opens, must never turn a loop into a hot loop. Each loop keeps one :class:`Backoff`, counts a failure (an error,
or a watch that ended long before its timeout) with :meth:`Backoff.failure`, which returns how long to sleep, and
calls :meth:`Backoff.reset` after a healthy stretch (a watch that lasted, a request that got through).
"""

from __future__ import annotations

import random
from typing import Callable

BASE_SECONDS = 1.0
CAP_SECONDS = 30.0
# A watch asked to last T seconds that ends within this share of T ended early: the server closed it, it was not
# the timeout. The API server honours timeoutSeconds, so a healthy watch lasts all of T.
SHORT_WATCH_SHARE = 0.5


def delay(failures: int, rng: Callable[[], float] = random.random, *, base: float = BASE_SECONDS,
          cap: float = CAP_SECONDS) -> float:
    """The pause after ``failures`` failures in a row: ``base`` doubled per failure up to ``cap``, of which a random
    half to all (``rng()`` in [0, 1)), so agents that failed together do not retry together."""
    ceiling = min(cap, base * (2 ** min(max(0, failures - 1), 32)))
    return ceiling * (0.5 + rng() / 2)


def watch_ended_early(elapsed: float, timeout: float) -> bool:
    """Whether a watch asked to last ``timeout`` seconds that ended after ``elapsed`` was cut short."""
    return elapsed < timeout * SHORT_WATCH_SHARE


class Backoff:
    """The failure count of one loop and the pause it asks for."""

    def __init__(self, rng: Callable[[], float] = random.random, *, base: float = BASE_SECONDS,
                 cap: float = CAP_SECONDS) -> None:
        self.rng, self.base, self.cap = rng, base, cap
        self.failures = 0

    def failure(self) -> float:
        """Count one more failure; returns the seconds to sleep before the next try."""
        self.failures += 1
        return delay(self.failures, self.rng, base=self.base, cap=self.cap)

    def reset(self) -> None:
        """A healthy stretch: the next failure starts from ``base`` again."""
        self.failures = 0
