"""Fakes the action-layer tests share: what a sandbox's exec returns, without a sandbox."""

from __future__ import annotations

from swebox.envs.sandbox import ExecResult


def exec_result(
    output: str,
    exit_code: int | None = 0,
    *,
    timed_out: bool = False,
    truncated: bool = False,
    duration_s: float = 0.25,
) -> ExecResult:
    """The real ExecResult of one command, with the defaults of a quick successful one."""
    return ExecResult(output, exit_code, timed_out, truncated, duration_s)
