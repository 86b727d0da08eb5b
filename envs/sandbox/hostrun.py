"""Host commands: what the host runs in a sandbox for itself, in a fresh process the agent cannot have shaped.

`Sandbox.exec` runs the agent's commands in its persistent bash, whose functions, aliases, traps, builtins and
variables are the agent's to change: a host command evaluated there (the diff capture) would run whatever the
agent put in its way. `Sandbox.run` asks the session's pid 1 instead (csrc/hostrun.c): it forks a fresh
process, which execs /bin/sh with a fixed environment (PATH=/usr/bin:/bin, HOME=/, LANG/LC_ALL=C.UTF-8) in `/`,
its stdout and stderr sockets that no process of the agent can open. `quiesce=True` kills every other process
of the session first (the agent's shell too: the next exec starts a new one, on the same files); `freeze=True`
stops them (SIGSTOP) for the command's time and continues them before the reply.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_STDOUT = 64 * 1024 * 1024


@dataclass
class RunResult:
    """What one host command did."""

    stdout: bytes
    """Its standard output, whole, up to max_stdout bytes (see truncated)."""
    stderr: str
    """The first 64 KiB of its standard error, invalid UTF-8 replaced."""
    exit_code: int | None
    """Its exit status (negative: killed by that signal); None when it timed out."""
    timed_out: bool
    """It hit its wall-clock limit and its process group was killed."""
    truncated: bool
    """stdout held more than max_stdout bytes; `stdout` is its first max_stdout."""
    duration_s: float
    """Wall-clock seconds from the request to the reply."""

    @property
    def ok(self) -> bool:
        """It ended by itself with status 0 and its whole stdout is here."""
        return self.exit_code == 0 and not self.timed_out and not self.truncated


def request(command: str, timeout: float, max_stdout: int, quiesce: bool, freeze: bool) -> dict:
    """The session request for one host command."""
    return {
        "op": "run",
        "command": command,
        "timeout": timeout,
        "max_output": max_stdout,
        "quiesce": quiesce,
        "freeze": freeze,
    }


def result(reply: dict, output: bytes) -> RunResult:
    """The RunResult of a "run" reply and the bytes that followed it (stdout, then stderr)."""
    split = int(reply["stdout_bytes"])
    return RunResult(
        output[:split],
        output[split:].decode("utf-8", "replace"),
        reply["exit_code"],
        reply["timed_out"],
        reply["truncated"],
        reply["duration_s"],
    )
