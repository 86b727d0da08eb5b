"""What both monitors do around the tested process: take the secrets, start it, read it, sign what they decided.

The grade monitor (grade_monitor.py, the pytest grader's) and the log monitor (log_monitor.py, the log grader's)
run in the grading sandbox as ``python -I -S -B MONITOR.py WORKDIR``: under ``-I`` Python puts neither the
script's folder nor anything else of the project on ``sys.path``, so a monitor cannot import this module there.
The graders ship each monitor with :func:`shipped`, which puts this file's text in place of the monitor's one
``from swebox.envs.tasks.graders.monitor_loop import (...)`` statement: the sandbox gets one self-contained file,
as before, and on the host (tests, imports) that statement is an ordinary import of the same code.

Standard library only, and the syntax of Python 3.5 (the log monitor runs on the oldest interpreter of SWE-bench
Verified's recipes): no f-strings, no annotations, no ``from __future__`` (it would have to come first).
"""

import ctypes
import hashlib
import hmac
import json
import os
import re
import select
import signal
import time

PR_SET_DUMPABLE = 4
_INCLUDE = re.compile(rb"^from swebox\.envs\.tasks\.graders\.monitor_loop import \([^)]*\)\n", re.MULTILINE)


def exit_code(status):
    """os.waitstatus_to_exitcode, which task interpreters older than Python 3.9 lack."""
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def take_secrets(workdir, spec_name):
    """(the run's HMAC key, the monitor's spec), each file deleted once read.

    The process turns non-dumpable first, so that no process of the sandbox (same uid, no capabilities) can read
    the key from the file, from this process's memory or through /proc; both files are gone before the tested
    process exists.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    key_path = os.path.join(workdir, "key")
    with open(key_path, "rb") as fh:
        key = fh.read()
    os.unlink(key_path)
    spec_path = os.path.join(workdir, spec_name)
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.unlink(spec_path)
    return key, spec


def spawn(argv, stdout_fd, close_fds):
    """Fork the tested process in a session of its own (so a timeout kills its whole group), stdout and stderr on
    ``stdout_fd``, the fds ``close_fds`` closed; ``argv`` is a list, or a callable run in the child that returns
    it (for the child's own fd set-up). The parent gets the pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(stdout_fd, 1)
            os.dup2(stdout_fd, 2)
            for fd in close_fds:
                os.close(fd)
            args = argv() if callable(argv) else argv
            os.execv(args[0], args)
        finally:
            os._exit(127)
    return pid


def read_until_exit(pid, source, read, take, deadline, pause=0.0):
    """Feed ``take`` what ``read()`` gives from ``source`` (a file or socket object or fd) until the process
    ``pid`` exits or the monotonic ``deadline`` passes; its exit status, or None when it timed out (then its
    process group is killed and reaped).

    Once the process exited, what its processes wrote last is read, but the end of the stream is not waited for:
    a process it left behind may hold the other end open.

    ``pause``: seconds to sleep after each read, so that the writer's many small writes queue in the kernel
    and are read together instead of each waking this process (and, on a busy machine, each costing the
    writer its CPU: 0.3-0.7 ms a write at load 7 on 2 cores). What was written stays written: a reader that
    reads later sees the same bytes, and the same sender of each.
    """
    exit_status, eof = None, False
    while exit_status is None and time.monotonic() < deadline:
        if eof:
            time.sleep(0.05)
        elif select.select([source], [], [], 0.2)[0]:
            data = read()
            eof = not data
            take(data)
            if pause and data:
                time.sleep(pause)
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exit_status = exit_code(status)
            while not eof and select.select([source], [], [], 0)[0]:
                data = read()
                eof = not data
                take(data)
    if exit_status is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    return exit_status


def write_signed(workdir, name, tag, key, payload):
    """Write ``WORKDIR/NAME``: ``TAG <hmac-sha256 hex>``, a newline, ``payload``; whole or not at all (a temporary
    file renamed). A file, not the command's output: the output is capped (head and tail kept), this is not."""
    mac = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
    temporary = os.path.join(workdir, name + "." + str(os.getpid()))
    with open(temporary, "wb") as fh:
        fh.write(tag + b" " + mac + b"\n" + payload)
    os.replace(temporary, os.path.join(workdir, name))


def shipped(monitor):
    """The bytes of the monitor file ``monitor`` (a path) as written into the sandbox: its one import of this
    module replaced by this module's text, so that it runs with nothing but the standard library."""
    with open(monitor, "rb") as fh:
        text = fh.read()
    with open(__file__, "rb") as fh:
        loop = fh.read()
    found = _INCLUDE.findall(text)
    if len(found) != 1:
        # concatenation, not an f-string or str.format: this file keeps Python 3.5's syntax, and ruff would
        # rewrite a format() call into an f-string
        raise ValueError(str(monitor) + ": expected one `from swebox.envs.tasks.graders.monitor_loop import (...)` "
                         "statement to replace; found " + str(len(found)))
    return _INCLUDE.sub(lambda _: loop + b"\n", text)
