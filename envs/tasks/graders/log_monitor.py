"""The log monitor: runs a log-graded task's test script and signs the log it read. Standalone.

Usage (the log grader writes it, with ``key`` and ``log_monitor.json``, into a fresh folder outside /testbed)::

    python -I -S -B log_monitor.py WORKDIR

Standard library only, and the syntax of Python 3.5 (the oldest interpreter of SWE-bench Verified's recipes
runs it); the loop it shares with the grade monitor is monitor_loop.py, put into the file when it is shipped.
Like the grade monitor of the JUnit grader, it reads the run's HMAC key from ``WORKDIR/key``,
deletes the file and turns non-dumpable before the tested process exists. It then runs ``bash -c SCRIPT``
(the script in memory, never in a file the tests could rewrite while bash reads it) with stdout and stderr on
one pipe, keeps everything it reads in its own memory, and when bash exits writes ``WORKDIR/log.signed``:
``SWEBOX-LOG <hmac-sha256 hex>``, a newline, a JSON header line (bash's exit status, whether it timed out or
the log was cut), a newline, the log's bytes. The tested process can print to the pipe, as under the official
harness, but it cannot rewrite what was printed, fake how the script ended, or write a log the host accepts.
"""

import json
import os
import sys
import time

from swebox.envs.tasks.graders.monitor_loop import (
    read_until_exit,
    spawn,
    take_secrets,
    write_signed,
)

MAX_LOG_BYTES = 256 * 1024 * 1024


def run(workdir):
    # the script (its nonce) is read once and gone before the tested process exists, like the key
    key, spec = take_secrets(workdir, "log_monitor.json")
    read_end, write_end = os.pipe()
    pid = spawn(["/bin/bash", "-c", spec["script"]], write_end, [read_end])
    os.close(write_end)
    chunks, size, cut = [], 0, False

    def take(data):
        nonlocal size, cut
        if size + len(data) > MAX_LOG_BYTES:
            data, cut = data[:MAX_LOG_BYTES - size], True
        chunks.append(data)
        size += len(data)

    deadline = time.monotonic() + float(spec["timeout"])
    exit_status = read_until_exit(pid, read_end, lambda: os.read(read_end, 1 << 16), take, deadline)
    timed_out = exit_status is None
    head = json.dumps({"exit": exit_status, "timed_out": timed_out, "cut": cut}, sort_keys=True).encode()
    write_signed(workdir, "log.signed", b"SWEBOX-LOG", key, head + b"\n" + b"".join(chunks))


if __name__ == "__main__":
    run(sys.argv[1])
