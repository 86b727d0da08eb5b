"""Host-side helpers handed sandbox-controlled data (issue 11, classes 4-7): each test is a real attack from
inside a real sandbox against a helper that runs as the host (read_file/write_file, snapshot, reset, layers)."""

from __future__ import annotations

import os
import threading

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError


def _in_thread(fn, timeout: float = 10.0):
    """Run `fn` in a thread; (finished, result or exception)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test
            box["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), box.get("value"), thread


def test_file_helpers_refuse_fifos_without_blocking(sandbox: Sandbox):
    """A FIFO at a path the host reads or writes must not block the host thread (it holds the sandbox's lock)."""
    r = sandbox.exec("mkfifo /testbed/fifo /testbed/wfifo && ln -s /testbed/fifo /testbed/to_fifo && echo ok")
    assert r.output == "ok\n", r.output
    host_view = f"/proc/{sandbox._session_pid}/root/testbed"
    for call, unblock in ((lambda: sandbox.read_file("/testbed/fifo"), ("fifo", os.O_WRONLY)),
                          (lambda: sandbox.read_file("/testbed/to_fifo"), ("fifo", os.O_WRONLY)),
                          (lambda: sandbox.write_file("/testbed/wfifo", b"x"), ("wfifo", os.O_RDONLY))):
        finished, value, thread = _in_thread(call, timeout=10.0)
        if not finished:  # the old helpers block in open(): free the thread before failing
            fd = os.open(f"{host_view}/{unblock[0]}", unblock[1] | os.O_NONBLOCK)
            os.close(fd)
            thread.join(10.0)
        assert finished, "a host-side file helper blocked on a FIFO planted by the agent"
        assert isinstance(value, SandboxError) and "FIFO" in str(value), value
    # the sandbox is still usable, and regular files (also through links inside the sandbox) still work
    sandbox.write_file("/testbed/plain", b"data")
    assert sandbox.read_file("/testbed/plain") == b"data"
    assert sandbox.exec("cat /testbed/plain").output == "data"
    with pytest.raises(SandboxError, match="character device"):
        sandbox.read_file("/dev/zero")


SYSV_SHM = (
    "python3 -c \"import ctypes; libc = ctypes.CDLL(None); "
    "print(libc.shmget(0x5eb0c5, 4096, 0o1000 | 0o600) >= 0)\""  # IPC_CREAT: a segment that outlives its maker
)


def test_reset_gives_a_new_ipc_namespace(sandbox: Sandbox):
    """SysV IPC outlives the processes that made it; a reset must not hand it to the next session."""
    assert sandbox.exec(SYSV_SHM).output == "True\n"
    assert str(0x5eb0c5) in sandbox.exec("cat /proc/sysvipc/shm").output
    sandbox.reset()
    left = sandbox.exec("tail -n +2 /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem").output
    assert str(0x5eb0c5) not in left, f"a SysV shm segment survived reset():\n{left}"
    ipc_before = sandbox.exec("readlink /proc/self/ns/ipc").output
    sandbox.reset()
    assert sandbox.exec("readlink /proc/self/ns/ipc").output != ipc_before
