"""I/O budget: bound the archive megabytes being unpacked (or built) at once on a node.

Concurrent unpacking saturates a disk long before it saturates the CPUs; the paper this project follows
caps it at about 2,000 MB of archive in flight per node. Within a process this is a weighted semaphore;
across Ray workers on one node, the same number is a custom Ray resource (see ``ray_budget``).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

MB = 1_000_000
DEFAULT_BUDGET_MB = 2000


def weight_mb(nbytes: int, budget_mb: int) -> int:
    """Units of budget an archive of ``nbytes`` takes: whole MB rounded up, at least 1, at most the
    budget (an archive larger than the whole budget runs alone instead of waiting forever)."""
    if budget_mb < 1:
        raise ValueError(f"I/O budget: expected at least 1 MB; found {budget_mb}.")
    return min(budget_mb, max(1, math.ceil(nbytes / MB)))


class IOBudget:
    """A weighted semaphore over MB in flight; records the peak so benchmarks and tests can check it."""

    def __init__(self, budget_mb: int = DEFAULT_BUDGET_MB) -> None:
        if budget_mb < 1:
            raise ValueError(
                f"IOBudget.budget_mb: expected at least 1; found {budget_mb}. "
                f"Use the default {DEFAULT_BUDGET_MB} or a positive number of MB."
            )
        self.budget_mb = budget_mb
        self.in_flight_mb = 0
        self.peak_mb = 0
        self._cond = threading.Condition()

    def acquire(self, nbytes: int) -> int:
        """Block until ``nbytes`` of archive fit under the budget; returns the weight taken."""
        weight = weight_mb(nbytes, self.budget_mb)
        with self._cond:
            self._cond.wait_for(lambda: self.in_flight_mb + weight <= self.budget_mb)
            self.in_flight_mb += weight
            self.peak_mb = max(self.peak_mb, self.in_flight_mb)
        return weight

    def release(self, weight: int) -> None:
        with self._cond:
            self.in_flight_mb -= weight
            self._cond.notify_all()

    @contextlib.contextmanager
    def hold(self, nbytes: int) -> Iterator[int]:
        weight = self.acquire(nbytes)
        try:
            yield weight
        finally:
            self.release(weight)
