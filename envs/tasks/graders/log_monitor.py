"""The log monitor: runs a log-graded task's test script and signs the log it read. Standalone.

Usage (the log grader writes it, with ``key`` and ``log_monitor.json``, into a fresh folder outside /testbed)::

    python -I -S -B log_monitor.py WORKDIR

Standard library only, and the syntax of Python 3.5 (the oldest interpreter of SWE-bench Verified's recipes
runs it). Like the grade monitor of the JUnit grader, it reads the run's HMAC key from ``WORKDIR/key``,
deletes the file and turns non-dumpable before the tested process exists. It then runs ``bash -c SCRIPT``
(the script in memory, never in a file the tests could rewrite while bash reads it) with stdout and stderr on
one pipe, keeps everything it reads in its own memory, and when bash exits writes ``WORKDIR/log.signed``:
``SWEBOX-LOG <hmac-sha256 hex>``, a newline, a JSON header line (bash's exit status, whether it timed out or
the log was cut), a newline, the log's bytes. The tested process can print to the pipe, as under the official
harness, but it cannot rewrite what was printed, fake how the script ended, or write a log the host accepts.
"""

import ctypes
import hashlib
import hmac
import json
import os
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
MAX_LOG_BYTES = 256 * 1024 * 1024


def _exit_code(status):
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def _nondumpable():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def run(workdir):
    _nondumpable()  # before the key is read
    key_path = os.path.join(workdir, "key")
    with open(key_path, "rb") as fh:
        key = fh.read()
    os.unlink(key_path)
    spec_path = os.path.join(workdir, "log_monitor.json")
    with open(spec_path) as fh:
        spec = json.load(fh)
    os.unlink(spec_path)  # the script (its nonce): read once, gone before the tested process exists
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(read_end)
            os.execv("/bin/bash", ["/bin/bash", "-c", spec["script"]])
        finally:
            os._exit(127)
    os.close(write_end)
    deadline = time.monotonic() + float(spec["timeout"])
    chunks, size, cut, exit_status, eof = [], 0, False, None, False

    def take(data):
        nonlocal size, cut
        if size + len(data) > MAX_LOG_BYTES:
            data, cut = data[:MAX_LOG_BYTES - size], True
        chunks.append(data)
        size += len(data)

    while exit_status is None and time.monotonic() < deadline:
        ready = select.select([read_end], [], [], 0.2)[0] if not eof else time.sleep(0.05)
        if ready:
            data = os.read(read_end, 1 << 16)
            eof = not data
            take(data)
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exit_status = _exit_code(status)
            # what bash's processes wrote last; not waiting for the end of the stream (a process left behind
            # may hold the pipe open)
            while not eof and select.select([read_end], [], [], 0)[0]:
                data = os.read(read_end, 1 << 16)
                eof = not data
                take(data)
    timed_out = exit_status is None
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    head = json.dumps({"exit": exit_status, "timed_out": timed_out, "cut": cut}, sort_keys=True).encode()
    payload = head + b"\n" + b"".join(chunks)
    mac = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
    temporary = os.path.join(workdir, "log.signed." + str(os.getpid()))
    with open(temporary, "wb") as fh:
        fh.write(b"SWEBOX-LOG " + mac + b"\n" + payload)
    os.replace(temporary, os.path.join(workdir, "log.signed"))


if __name__ == "__main__":
    run(sys.argv[1])
