"""The grade monitor: the process in the grading sandbox that decides and signs the verdict. Standalone.

Usage (the grader writes it, with ``key`` and ``monitor.json``, into a fresh folder outside /testbed)::

    python -I -S -B grade_monitor.py WORKDIR

Standard library only and ``-S`` (no site-packages, no ``.pth`` file runs): nothing of the project is imported (the
loop it shares with the log monitor, monitor_loop.py, is put into the file when it is shipped).
Before it starts the tested process it reads the run's HMAC key from ``WORKDIR/key`` and deletes the file, and
makes itself non-dumpable, so no process of the sandbox (same uid, no capabilities) can read the key from the
file, from its memory or through ``/proc``. It then runs ``pytest_runner.py`` as its child with a channel for the
per-test events (a unix socket with ``SO_PASSCRED``: bytes any other process sent are tampering; the runner
pins its end, ``runner_pin.py``), the child's output going to ``WORKDIR/pytest.out``, and judges the stream as
it arrives (the runner must say it pinned the channel):
every collected test needs its setup, call (when setup passed) and teardown report, once each and in order;
the stream must end with a finish event from a pytest that exited 0 or 1; both canary tests must come out
as planted (one passed, one failed). It also holds what the tested process must not be able to refresh or
read: ``monitor.json`` (the canaries' planted statuses, the rewritten-test table) is deleted once read, the
runner's start-up snapshot of pytest's objects arrives before any project code runs and every later check
is compared with it here, and each task test file must be reported loaded from its own cache entry. It
writes ``WORKDIR/verdict``: ``SWEBOX-VERDICT <hmac-sha256 hex>``, a newline, the verdict's JSON; the grader
accepts nothing else. Killing the monitor, leaving early or writing
that file from the tested process yields no verdict (or a forged one, which counts for nothing).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import sys
import time

from swebox.envs.tasks.graders.monitor_loop import (
    read_until_exit,
    spawn,
    take_secrets,
    write_signed,
)

_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid
_RANK = {"error": 5, "failed": 4, "xpassed": 3, "skipped": 2, "xfailed": 1, "passed": 0}
MAX_PROBLEMS = 50
READ_PAUSE = 0.01
"""Seconds between reads of the report channel (monitor_loop.read_until_exit's ``pause``)."""


def status_of(when: str, outcome: str, xfail: bool) -> str:
    """One report's status; xfailed, xpassed and skipped stay distinct (none of them is a pass)."""
    if when == "call":
        if outcome == "passed":
            return "xpassed" if xfail else "passed"
        if outcome == "skipped":
            return "xfailed" if xfail else "skipped"
        return "failed"
    if outcome == "failed":
        return "error"
    if outcome == "skipped":
        return "xfailed" if xfail else "skipped"
    return "passed"


class Judge:
    """Folds the event stream into per-test results and the problems that make the run unusable."""

    def __init__(self, canaries: dict[str, str], rewritten: dict[str, str] | None = None) -> None:
        self.canaries = canaries
        self.rewritten = dict(rewritten or {})  # test file -> its cache entry: what the runner must load
        self.loaded: dict[str, str] = {}
        self.rewrite_on = False
        self.baseline: dict[str, int] | None = None
        self.checked = False
        self.collected: list[str] | None = None
        self.phases: dict[str, list[str]] = {}
        self.results: dict[str, list] = {}  # id -> [status, duration, message]
        self.problems: list[str] = []
        self.tampered: list[str] = []
        self.finish: dict | None = None
        self.started = False
        self.unpinned: str | None = None  # the runner's word on pinning its channel ('' = pinned)

    def problem(self, text: str, tampering: bool = False) -> None:
        target = self.tampered if tampering else self.problems
        if len(target) < MAX_PROBLEMS and text not in target:
            target.append(text)

    def feed(self, line: bytes) -> None:
        try:
            event = json.loads(line)
            kind = event["e"]
        except (ValueError, KeyError, TypeError):
            self.problem(f"unreadable event on the report channel: {line[:120]!r}", True)
            return
        if self.finish is not None:
            self.problem(f"event after the finish: {kind!r}", True)
        elif kind == "pinned":  # sent before any project code runs; a second one is not the runner's
            if self.unpinned is not None or self.baseline is not None:
                self.problem("second or late pinned event", True)
            else:
                self.unpinned = str(event.get("why", "?"))
        elif kind == "baseline":
            if self.baseline is not None or self.started:
                self.problem("second baseline event", True)
            else:
                self.baseline = {str(k): v for k, v in dict(event.get("objects", {})).items()}
        elif kind == "start":
            if self.started:
                self.problem("second start event", True)
            self.started = True
            self.rewrite_on = bool(event.get("rewrite"))
        elif kind == "rewrite":
            self._rewrite(str(event.get("file")), str(event.get("entry") or ""))
        elif kind == "collected":
            if self.collected is not None:
                self.problem("second collection event", True)
            ids = [str(i) for i in event.get("ids", [])]
            self.collected = ids
            if len(set(ids)) != len(ids):
                self.problem("a test id was collected twice")
        elif kind == "report":
            self._report(event)
        elif kind == "check":
            for text in event.get("problems", []):
                self.problem(str(text), True)
            if "objects" in event:
                self._compare(dict(event["objects"]))
        elif kind == "finish":
            self.finish = event
        else:
            self.problem(f"unknown event {kind!r}", True)

    def _compare(self, objects: dict) -> None:
        """The runner's critical objects now against the snapshot it sent before any project code ran (held
        here, where the tested process cannot refresh it)."""
        if self.baseline is None:
            self.problem("a check of pytest's objects without a start-up snapshot", True)
            return
        self.checked = True
        for name, ident in self.baseline.items():
            if objects.get(name) != ident:
                self.problem(f"replaced: {name}", True)
        for name in objects:
            if name not in self.baseline and ".TestCase." in name:
                self.problem(f"added: {name}", True)

    def _rewrite(self, path: str, entry: str) -> None:
        """pytest loaded a repository file: a task test file must get exactly its cached rewritten code."""
        want = self.rewritten.get(path)
        if not self.rewrite_on or want is None:
            return
        if entry != want:
            self.problem(f"test file {path} was loaded from {entry or 'its source'}, not from its cached "
                         "rewrite", True)
        else:
            self.loaded[path] = entry

    def _report(self, event: dict) -> None:
        test_id, when = str(event.get("id")), str(event.get("when"))  # "None" is no phase either
        if self.collected is None or test_id not in self.collected:
            self.problem(f"a report for a test that was not collected: {test_id!r}", True)
            return
        seen = self.phases.setdefault(test_id, [])
        expected = ("setup",) if not seen else ("call", "teardown") if seen == ["setup"] else ("teardown",)
        if seen[-1:] == ["teardown"] or when not in expected:
            self.problem(f"{test_id}: {when} report after {seen or 'nothing'}", True)
            return
        seen.append(when)
        status = status_of(when, event.get("outcome", ""), bool(event.get("xfail")))
        old = self.results.get(test_id)
        duration = float(event.get("dur", 0.0))
        if old is None:
            self.results[test_id] = [status, duration, str(event.get("msg", ""))]
            return
        old[1] += duration
        if _RANK[status] > _RANK[old[0]]:
            old[0], old[2] = status, str(event.get("msg", ""))

    def verdict(self, exit_status: int | None, timed_out: bool) -> dict:
        if timed_out:
            self.problems.append("the tests timed out")
        elif self.finish is None:
            self.problems.append(
                f"the tested process ended without finishing (exit status {exit_status}): "
                "a crash, os._exit, or a signal"
            )
        else:
            code = self.finish.get("exit")
            if code not in (0, 1):
                self.problems.append(f"pytest did not complete a run: exit {code!r}")
            for f in self.finish.get("missing_files", []):
                self.problems.append(f"test file not found: {f}")
            if exit_status != 0:
                self.problems.append(f"the tested process exited with status {exit_status} after finishing")
        for test_id in self.collected or []:
            phases = self.phases.get(test_id, [])
            if phases[-1:] != ["teardown"] and not timed_out and self.finish is not None:
                self.problem(f"{test_id}: incomplete reports ({phases or 'none'})")
        if self.unpinned is None:
            self.problem("the runner never said its report channel was pinned", True)
        elif self.unpinned:
            self.problem(f"the report channel could not be pinned to its fd: {self.unpinned}")
        if self.finish is not None and not self.checked:
            self.problem("no check of pytest's objects against the start-up snapshot", True)
        if self.rewrite_on:
            files = {test_id.split("::", 1)[0] for test_id in self.collected or []}
            for path in self.rewritten:
                if path.startswith("/testbed/") and path[len("/testbed/"):] in files and path not in self.loaded:
                    self.problem(f"test file {path} was not loaded from its cached rewrite", True)
        for test_id, expected in self.canaries.items():
            got = self.results.get(test_id, ["missing"])[0]
            if got != expected:
                self.problem(f"canary test {test_id} was reported {got}, planted to be {expected}", True)
        return {
            "results": self.results,
            "problems": self.problems,
            "tampered": self.tampered,
            "timed_out": timed_out,
            "collected": len(self.collected or []),
        }


def run(workdir: str) -> None:
    # the canaries' planted statuses (monitor.json) are read once and gone before the tested process exists
    key, spec = take_secrets(workdir, "monitor.json")
    judge = Judge(spec["canaries"], spec.get("rewritten"))
    # A socket, not a pipe: with SO_PASSCRED the kernel tells for every byte which process sent it, so only
    # the runner's own process can write events (a forked helper of the tested code cannot); the runner pins
    # its end to its fd (runner_pin.py), so nothing can put a filter between the two.
    channel, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    channel.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    write_end = runner_end.detach()
    out = os.open(os.path.join(workdir, "pytest.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def runner_argv() -> list[str]:  # in the child, after its output went to pytest.out
        # a high number: the runner pins it, and a test that dup2()s onto a low fd of its own (3, 4) must not
        # meet the pin
        event_fd = fcntl.fcntl(write_end, fcntl.F_DUPFD, 100)
        os.close(write_end)
        os.set_inheritable(event_fd, True)
        return [*spec["argv"], str(event_fd)]

    pid = spawn(runner_argv, out, [channel.fileno()])
    os.close(write_end)
    os.close(out)
    buffer = b""

    def receive() -> bytes:
        data, ancillary, _, _ = channel.recvmsg(1 << 16, socket.CMSG_SPACE(_UCRED.size))
        if data:
            senders = [_UCRED.unpack(d[:_UCRED.size])[0] for level, kind, d in ancillary
                       if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS]
            if senders != [pid]:
                judge.problem(f"events sent by process {senders or 'unknown'}, not by the runner ({pid})", True)
        return data

    def take(data: bytes) -> None:
        nonlocal buffer
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            judge.feed(line)

    # read in batches (READ_PAUSE): the runner's ~3 events a test then do not each wake this process
    exit_status = read_until_exit(pid, channel, receive, take, time.monotonic() + float(spec["timeout"]), READ_PAUSE)
    timed_out = exit_status is None
    if buffer.strip():
        judge.problem("the report channel ended inside an event", True)
    payload = json.dumps(judge.verdict(exit_status, timed_out), sort_keys=True).encode()
    write_signed(workdir, "verdict", b"SWEBOX-VERDICT", key, payload)


if __name__ == "__main__":
    run(sys.argv[1])
