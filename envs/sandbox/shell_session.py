"""ShellSession: the host's end of a sandbox's shell session (the supervisor, csrc/supervisor.c, and its bash).

nsinit starts a session and hands its socket to the host over the control socket; this object takes it, waits
until the supervisor has pivoted into the sandbox's root, and sends it the agent's commands (exec) and the host's
own (run, hostrun.py). A session that dies under a command is replaced by a new one on the same files.
The Sandbox (sandbox.py) owns the control socket, the lock and the lifecycle; this object owns only the session's
socket, and never closes the control socket.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from . import hostrun, protocol
from .policy import SandboxError

STARTUP_TIMEOUT_S = 60.0


@dataclass
class ExecResult:
    """What one command did."""

    output: str
    """stdout and stderr interleaved, invalid UTF-8 replaced; head and tail kept when over the limit."""
    exit_code: int | None
    """The command's exit status; None when it timed out or the shell died under it."""
    timed_out: bool
    """The command hit its wall-clock limit and its processes were killed."""
    truncated: bool
    """The output was longer than the policy's max_output_bytes; the middle was cut."""
    duration_s: float
    """Wall-clock seconds from sending the command to its end."""


def recv_checked(sock: socket.socket, doing: str) -> dict:
    """One reply from nsinit or a session, its fds closed; an error reply or a lost peer is a SandboxError."""
    try:
        reply, fds = protocol.recv(sock)
    except (protocol.ProtocolError, OSError) as exc:
        raise SandboxError(f"{doing}: the sandbox process went away ({exc})") from None
    for fd in fds:
        os.close(fd)
    if "error" in reply:
        raise SandboxError(f"{doing}: {reply['error']}")
    return reply


class ShellSession:
    """The current shell session of one sandbox; not thread-safe on its own (the Sandbox's lock guards it)."""

    def __init__(self, ctl: socket.socket, enforced_by: dict[str, str]) -> None:
        self._ctl = ctl
        """nsinit's control socket (the Sandbox's): new sessions arrive on it."""
        self._enforced_by = enforced_by
        """The sandbox's Limits.enforced_by: each new session writes the seccomp filter it installed there."""
        self._sock: socket.socket | None = None
        self.pid = 0
        """Host pid of the session's pid 1 (the supervisor); its /proc/PID/root is the sandbox's root."""
        self.upper = ""
        """The writable layer's path inside nsinit's mount namespace, for the session now running."""

    def take(self, doing: str, hint: str = "") -> None:
        """Receive a new shell session from nsinit and wait until it is ready; errors say `doing` and `hint`."""
        try:
            reply, fds = protocol.recv(self._ctl)
        except (protocol.ProtocolError, OSError) as exc:
            raise SandboxError(f"{doing}: the sandbox process went away ({exc})") from None
        if "error" in reply or not fds:
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"{doing}: {reply.get('error', 'no session was started')}{hint}")
        if self._sock is not None:
            self._sock.close()
        self._sock = session = socket.socket(fileno=fds[0])
        for fd in fds[1:]:  # nothing else of the session's is used here: closed before a failed start can leak it
            os.close(fd)
        session.settimeout(STARTUP_TIMEOUT_S)
        # the supervisor says when it has pivoted into the sandbox's root: until then its /proc/PID/root
        # is still the host's, and host-side file helpers must not use it
        ready = recv_checked(session, f"{doing}: starting the shell session")
        # what the supervisor actually installed (or why nothing), not what the policy asked for
        self._enforced_by["syscalls"] = ready.get("seccomp", "unknown")
        self.upper = reply["upper"]
        self.pid = reply["pid"]

    def renew(self, request: dict) -> None:
        """Ask nsinit for a new session (`request`: {"op": "session"} or {"op": "reset"}) and take it."""
        protocol.send(self._ctl, request)
        self.take(request["op"])

    def close(self) -> None:
        """Close the session's socket: the session takes that as the order to stop."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _live(self) -> socket.socket:
        """The session's socket; a running sandbox always has one (its _require_running checked the state)."""
        assert self._sock is not None, "no shell session"
        return self._sock

    def exec(self, command: str, timeout: float) -> ExecResult:
        """Run `command` in the persistent shell; a session that died under it is replaced and reported."""
        started = time.monotonic()
        try:
            session = self._live()
            protocol.send(session, {"op": "exec", "command": command, "timeout": timeout})
            session.settimeout(timeout + 30.0)
            reply, output = protocol.recv_reply(session, "output_bytes")
        except (protocol.ProtocolError, OSError) as exc:
            # the supervisor itself died (e.g. chosen by the OOM killer): new shell, same files
            self.renew({"op": "session"})
            return ExecResult(
                f"[swebox: the sandbox's shell session died ({exc}); a new one was started on the same files]\n",
                None,
                False,
                False,
                time.monotonic() - started,
            )
        if "error" in reply:
            raise SandboxError(f"exec: {reply['error']}")
        return ExecResult(
            output.decode("utf-8", "replace"),
            reply["exit_code"],
            reply["timed_out"],
            reply["truncated"],
            reply["duration_s"],
        )

    def run(self, command: str, timeout: float, max_stdout: int, quiesce: bool, freeze: bool) -> hostrun.RunResult:
        """The host's own `command` in a fresh process of the session (Sandbox.run says more)."""
        try:
            session = self._live()
            protocol.send(session, hostrun.request(command, timeout, max_stdout, quiesce, freeze))
            session.settimeout(timeout + 30.0)
            reply, output = protocol.recv_reply(session, "output_bytes")
        except (protocol.ProtocolError, OSError) as exc:
            self.renew({"op": "session"})  # the files are still there; the host's command is not done
            raise SandboxError(f"run: the sandbox's shell session died ({exc}); a new one was started") from None
        if "error" in reply:
            raise SandboxError(reply["error"])
        return hostrun.result(reply, output)
