"""What one rollout cost the host: wall seconds, CPU seconds, peak memory, bytes written, grading's share.

:class:`EpisodeCost` reads the episode's sandbox usage (swebox.envs.sandbox.usage: its cgroups, else procfs)
when the episode starts and when it ends, and adds the grading sandbox's usage from the grade report. The result
is the final info's ``cost`` (and so the trajectory and eval records') and the ``env/cost_*`` metrics
(docs/metrics.md). A reused sandbox (reset between episodes) counts from the reset on; a forked child (search)
carries its parent's CPU seconds up to the fork. ``EpisodeConfig.cost=False`` reads nothing.
"""

from __future__ import annotations

import time
from typing import Any

from swebox.envs.sandbox import Sandbox, SandboxError

MB = 1024 * 1024
METRICS = ("env/wall_s", "env/cpu_s", "env/grade_cpu_s", "env/peak_mb", "env/grade_peak_mb", "env/upper_mb")
"""Per-episode cost metrics (docs/metrics.md); 0 where the host could not say."""


def _read(sandbox: Sandbox | None, reset_peak: bool = False) -> Any:
    if sandbox is None:
        return None
    try:
        return sandbox.usage(reset_peak=reset_peak)
    except (SandboxError, OSError):  # a sandbox the agent took down: its cost is unknown, not an error
        return None


class EpisodeCost:
    """The running cost of one episode."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.cpu_base = 0.0  # the sandbox's CPU seconds when the episode started
        self.cpu_carried = 0.0  # CPU seconds spent before a fork, in the parent's sandbox

    def begin(self, sandbox: Sandbox | None, started: float) -> None:
        """The episode starts at ``started`` (monotonic), before its reset, in ``sandbox`` (None: a sandbox that
        is new, or already in its start state, counts from zero)."""
        self.started, self.cpu_carried = started, 0.0
        usage = _read(sandbox, reset_peak=True) if self.enabled else None
        self.cpu_base = (usage.cpu_s or 0.0) if usage is not None else 0.0

    def fork(self, parent_sandbox: Sandbox) -> EpisodeCost:
        """A child's cost: the parent's wall clock and CPU seconds so far; its own sandbox counts from zero."""
        child = EpisodeCost(self.enabled)
        child.started = self.started
        usage = _read(parent_sandbox) if self.enabled else None
        child.cpu_carried = self.cpu_carried + (max(0.0, (usage.cpu_s or 0.0) - self.cpu_base) if usage else 0.0)
        return child

    def finish(self, sandbox: Sandbox | None, grade: dict[str, Any] | None, cache_hit: bool) -> dict[str, Any]:
        """The episode's cost (info["cost"]): its sandbox now, grading's from ``grade`` (nothing on a hit)."""
        cost: dict[str, Any] = {"wall_s": time.monotonic() - self.started}
        if not self.enabled:
            return cost
        usage = _read(sandbox)
        graded = (grade or {}).get("usage") or {} if not cache_hit else {}
        cost.update(
            cpu_s=None
            if usage is None or usage.cpu_s is None
            else self.cpu_carried + max(0.0, usage.cpu_s - self.cpu_base),
            peak_mb=None if usage is None or usage.peak_bytes is None else usage.peak_bytes / MB,
            upper_mb=None if usage is None or usage.upper_bytes is None else usage.upper_bytes / MB,
            grade_cpu_s=graded.get("cpu_s"),
            grade_peak_mb=None if graded.get("peak_bytes") is None else graded["peak_bytes"] / MB,
            source=usage.source if usage is not None else "unknown",
        )
        return cost


def cost_metrics(cost: dict[str, Any]) -> dict[str, float]:
    """The ``env/*`` cost metrics of one episode's cost (0.0 where unknown)."""
    return {name: float(cost.get(name.removeprefix("env/")) or 0.0) for name in METRICS}
