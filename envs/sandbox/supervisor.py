"""The shell supervisor: pid 1 of a sandbox session's PID namespace.

It owns one persistent bash (state such as `cd` and exported variables survives between commands, like a
terminal) and runs the exec protocol for the host: write the command, read the output until a per-command
random marker, cap the output, enforce the wall-clock timeout. It runs with no capabilities; it is pid 1, so
the agent's `kill -9 -1` cannot touch it, and when it dies the kernel kills everything in the session.
Standard library only, no relative imports (it runs inside the namespace, started by nsinit).
"""

from __future__ import annotations

import collections
import os
import resource
import select
import signal
import socket
import time

import protocol
import seccomp
import syscalls

BASH = "/bin/bash"
# The command travels NUL-terminated on bash's stdin, read by `read -d ''` and run by `eval`, so a syntax
# error in it is an ordinary error of `eval` instead of a shell left waiting for the rest of a quote.
BOOTSTRAP = (
    "__swebox_run() { IFS= read -r -d '' __swebox_cmd; eval \"$__swebox_cmd\" </dev/null; }\n"
    "set +o history 2>/dev/null; cd -- {workdir} 2>/dev/null || cd /\n"
)
# Every signal a process can catch, except SIGCHLD (the supervisor waits for its shell). In a PID namespace the
# kernel drops a signal to pid 1 from inside it only when pid 1 leaves it at SIG_DFL; Python installs its own
# SIGINT handler, so `kill -INT 1` from the agent's code would otherwise raise KeyboardInterrupt here and end
# the session. The supervisor ignores them all; the shell gets the defaults back.
CATCHABLE = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD))
# The C library's own real-time signals (32, 33 with glibc), which signal.signal cannot set
RESERVED = tuple(s for s in range(1, signal.NSIG) if s not in signal.valid_signals())
RESTART_NOTE = ("[swebox: the shell {how}; a new shell was started on the same files; the working directory"
                " is {cwd} and exported variables were reset]\n")


class OutputBuffer:
    """Keeps the first and last `limit/2` bytes of a stream and counts everything."""

    def __init__(self, limit: int) -> None:
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0
        self.half = max(limit // 2, 1)
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_len += len(data)
            while self.tail_len - len(self.tail[0]) >= self.half:
                self.tail_len -= len(self.tail.popleft())

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + self.tail_len

    def text(self) -> str:
        tail = b"".join(self.tail)
        if self.truncated:
            tail = tail[-self.half:]
            cut = self.total - len(self.head) - len(tail)
            middle = f"\n[... {cut} bytes of output cut ...]\n".encode()
            return (bytes(self.head) + middle + tail).decode("utf-8", "replace")
        return (bytes(self.head) + tail).decode("utf-8", "replace")


class Shell:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.pid = 0
        self.stdin = -1
        self.stdout = -1
        self.pending_note = ""

    def start(self, cwd: str = "/") -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the shell: limits, fresh env, exec bash
            try:
                os.setsid()
                os.dup2(in_r, 0)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                os.closerange(3, 65536)
                for name, value in self.cfg["rlimits"].items():
                    resource.setrlimit(getattr(resource, name), (value, value))
                _set_handlers(signal.SIG_DFL)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for sig in RESERVED:  # ignored by whoever started the sandbox (Python cannot reach them)
                    try:
                        syscalls.default_signal(sig)
                    except OSError:
                        pass
                try:
                    os.chdir(cwd)
                except OSError:
                    os.chdir("/")
                os.execve(BASH, ["bash", "--norc", "--noprofile"], self.cfg["env"])
            except BaseException as exc:
                os.write(2, f"swebox: cannot start {BASH}: {exc}\n".encode())
            os._exit(127)
        os.close(in_r)
        os.close(out_w)
        self.pid, self.stdin, self.stdout = pid, in_w, out_r
        os.set_blocking(out_r, False)
        workdir = "'" + str(self.cfg.get("workdir", "/")).replace("'", "'\\''") + "'"
        os.write(in_w, BOOTSTRAP.replace("{workdir}", workdir).encode())

    def alive(self) -> bool:
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return pid == 0

    def cwd(self) -> str:
        try:
            return os.readlink(f"/proc/{self.pid}/cwd")
        except OSError:
            return "/"

    def stop(self) -> None:
        for fd in (self.stdin, self.stdout):
            if fd >= 0:
                os.close(fd)
        self.stdin = self.stdout = -1
        kill_all_but_me()

    def restart(self, how: str) -> None:
        cwd = self.cwd()
        self.stop()
        self.start(cwd)
        self.pending_note = RESTART_NOTE.format(how=how, cwd=cwd)

    def exec(self, command: str, timeout: float, limit: int) -> dict:
        started = time.monotonic()
        out = OutputBuffer(limit)
        if self.pending_note:
            out.add(self.pending_note.encode())
            self.pending_note = ""
        if not self.alive():
            self.restart("had exited")
            out.add(self.pending_note.encode())
            self.pending_note = ""
        before = set(_pids())
        token = os.urandom(12).hex()
        marker = b"\n" + token.encode() + b" "
        script = (f"__swebox_run; printf '\\n{token} %d\\n' $?\n").encode() + command.replace("\0", "").encode(
            "utf-8", "surrogateescape") + b"\0"
        exit_code, timed_out, restarted = None, False, False
        window = b""
        try:
            _write_all(self.stdin, script)
        except OSError:
            pass  # the shell died; the read loop below sees EOF
        deadline = started + timeout
        grace_end = None
        while True:
            now = time.monotonic()
            end = grace_end if grace_end is not None else deadline
            if now >= end:
                if grace_end is None:  # timeout: kill what the command started, keep the shell
                    timed_out = True
                    kill_all_but_me(keep={self.pid}, only_new_since=before)
                    grace_end = time.monotonic() + 1.0
                    continue
                # the shell itself is stuck (a builtin loop): replace it
                self.restart("was stuck in a command that did not end")
                out.add(b"\n" + self.pending_note.encode())
                self.pending_note = ""
                restarted = True
                break
            ready, _, _ = select.select([self.stdout], [], [], min(end - now, 0.5))
            if not ready:
                continue
            try:
                data = os.read(self.stdout, 1 << 16)
            except BlockingIOError:
                continue
            if not data:  # EOF: the shell exited or was killed
                status = _reap(self.pid)
                self.restart(f"exited with status {status}")
                out.add(b"\n" + self.pending_note.encode())
                self.pending_note = ""
                restarted, exit_code = True, status
                break
            window = (window + data)[-512:]
            found = _find_marker(window, marker)
            if found:
                # bytes after the marker (a background job's output) belong to the output, the marker does not
                start, end, exit_code = found
                extra = window[end:]
                out.add(data)
                _strip_tail(out, len(window) - start)
                out.add(extra)
                break
            out.add(data)
        if timed_out:
            exit_code = None
            out.add(f"\n[swebox: the command timed out after {timeout:g} s and was killed]\n".encode())
        reap_zombies()
        return {"output": out.text(), "exit_code": exit_code, "timed_out": timed_out,
                "truncated": out.truncated, "duration_s": time.monotonic() - started,
                "shell_restarted": restarted}


def _find_marker(window: bytes, marker: bytes) -> tuple[int, int, int] | None:
    """Where the line "<marker><status>\\n" starts and ends in `window`, and the status; None until it is whole.
    A plain search, not a regular expression compiled anew for each command's random token."""
    start = window.find(marker)
    if start < 0:
        return None
    digits_at = start + len(marker)
    end = window.find(b"\n", digits_at)
    if end < 0 or not window[digits_at:end].isdigit():
        return None
    return start, end + 1, int(window[digits_at:end])


def _strip_tail(out: OutputBuffer, size: int) -> None:
    """Remove the last `size` bytes added (the marker line and what followed it)."""
    out.total -= size
    while size > 0 and out.tail:
        last = out.tail.pop()
        out.tail_len -= len(last)
        if len(last) > size:
            out.tail.append(last[:-size])
            out.tail_len += len(last) - size
            size = 0
        else:
            size -= len(last)
    if size > 0:
        del out.head[len(out.head) - size:]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def kill_all_but_me(keep: set[int] | frozenset[int] = frozenset(), only_new_since: set[int] | None = None) -> None:
    """SIGKILL every process of this PID namespace except pid 1 and `keep`, until none is left.

    Repeated passes catch processes forked while we kill (fork bombs); with `only_new_since`, processes
    that existed before the command started (e.g. `nohup ... &` servers of an earlier command) survive.
    """
    me = os.getpid()
    for _ in range(200):
        victims = [p for p in _pids() if p != me and p not in keep
                   and (only_new_since is None or p not in only_new_since)]
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap_zombies()
        time.sleep(0.001)
    reap_zombies()


def child_events() -> int:
    """A file descriptor that becomes readable when a SIGCHLD arrives (signal.set_wakeup_fd), so idle loops
    block on their inputs and this instead of waking up on a timer to reap."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a Python handler: the wakeup fd is written
    return read_end


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _reap(pid: int) -> int:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return -1
    return os.waitstatus_to_exitcode(status)


def _set_handlers(handler) -> None:
    for sig in CATCHABLE:
        try:
            signal.signal(sig, handler)
        except (OSError, ValueError):  # the C library's reserved real-time signals
            pass


def _exec_reply(shell: Shell, request: dict, limit: int) -> dict:
    """Run one command; a failure of the supervisor itself (no pipe or process left to start a shell with:
    the agent's doing) is the command's result, never an error reply, so the host's exec() does not raise."""
    started = time.monotonic()
    try:
        return shell.exec(str(request.get("command", "")), float(request.get("timeout", 60)), limit)
    except Exception as exc:
        return {"output": f"[swebox: the command could not be run: {type(exc).__name__}: {exc}]\n",
                "exit_code": None, "timed_out": False, "truncated": False,
                "duration_s": time.monotonic() - started, "shell_restarted": False}


def serve(sock: socket.socket, cfg: dict) -> None:
    """The session's main loop: one request, one reply, until the host goes away."""
    _set_handlers(signal.SIG_IGN)
    # capabilities are gone and no_new_privs is set (nsinit did both): the filter goes on this process, so
    # the shell and everything it starts inherit it, and nothing inside can take it off
    filtering = seccomp.apply(cfg["seccomp"]["enabled"], cfg["seccomp"]["allow_ptrace"])
    shell = Shell(cfg)
    shell.start()
    # only now is the session's root final: the host reaches files through /proc/PID/root after this
    protocol.send(sock, {"op": "ready", "seccomp": filtering})
    wake = child_events()
    reap_zombies()  # whatever died before the wakeup fd was there
    while True:
        # idle, this blocks: it wakes for a request or a SIGCHLD (a process reparented to pid 1 died)
        ready, _, _ = select.select([sock, wake], [], [])
        if wake in ready:
            drain(wake)
            reap_zombies()
        if sock not in ready:
            continue
        try:
            request, _fds = protocol.recv(sock)
        except (protocol.ProtocolError, OSError):
            os._exit(0)
        if request.get("op") == "exec":
            reply = _exec_reply(shell, request, int(cfg["max_output_bytes"]))
        else:
            reply = {"error": f"unknown request {request.get('op')!r}"}
        try:
            protocol.send(sock, reply)
        except OSError:
            os._exit(0)
