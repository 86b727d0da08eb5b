"""Running a project's test command in a sandbox and reading per-test results from its log.

The runner of projects graded by a log parser (JavaScript: ``node --test --test-reporter=tap`` read by
SWE-bench's TAP parser): the same interface as :class:`swebox.envs.tasks.synth.runner.SandboxRunner`
(``files``, ``run``, ``read_text``), so the pipeline validates candidates the same way, with results read
by the very parser the task's grader will use: an id here is an id there. ``run`` writes the changed files,
runs the whole command under a hard timeout, parses its output and resets the sandbox.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from swebox.envs.tasks.graders.log_parsers import UnparsableLog, normal_status, parse_log
from swebox.envs.tasks.synth.runner import RUN_DIR, RepoReader, RunResult

OUTPUT = f"{RUN_DIR}/output.txt"
_RESULT = re.compile(r"^(\s*)(ok|not ok) \d+ (.+)$")
MAX_DETAIL = 4000


def failure_details(log: str, ids: set[str]) -> dict[str, tuple[str, str]]:
    """Test id -> (message, the lines under its ``not ok`` line) for the failed ``ids`` of a TAP log: TAP
    prints a failure's diagnostics (YAML: error, expected, actual, stack) indented below its result line."""
    lines = log.split("\n")
    out: dict[str, tuple[str, str]] = {}
    for i, line in enumerate(lines):
        match = _RESULT.match(line)
        if not match or match[2] != "not ok" or match[3].strip() not in ids:
            continue
        indent, block = len(match[1]), []
        for following in lines[i + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            block.append(following)
        text = "\n".join(block).strip()[:MAX_DETAIL]
        message = next((b.strip() for b in block if b.strip().startswith("error:")), "test failed")
        out[match[3].strip()] = (message, text)
    return out


class LogRunner(RepoReader):
    """Runs one command in one sandbox; not shared between threads (each worker owns one)."""

    def __init__(self, sandbox, test_cmd: str, log_parser: str, env: Mapping[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self.test_cmd = test_cmd
        self.log_parser = log_parser
        self.env = dict(env or {})
        self.files = frozenset(self.list_files())

    def command(self, timeout_s: float) -> str:
        """The shell command of one run (the test command's own output is the log)."""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (
            f"rm -rf {RUN_DIR} && mkdir -p {RUN_DIR} && cd /testbed && "
            f"env {assignments} timeout -s KILL {int(timeout_s) + 1} bash -c {shlex.quote(self.test_cmd)} "
            f"> {OUTPUT} 2>&1; echo exit=$?"
        )

    def run(self, changes: Mapping[str, str | bytes], paths: Sequence[str], timeout_s: float) -> RunResult:
        """Write ``changes``, run the whole test command (``paths`` are already in it), parse, reset."""
        del paths  # the command names its tests; a log-graded task runs the same command at grading
        try:
            for rel, content in changes.items():
                self.sandbox.write_file(f"/testbed/{rel}", content)
            done = self.sandbox.exec(self.command(timeout_s), timeout=timeout_s + 15)
            try:
                log = self.sandbox.read_file(OUTPUT).decode("utf-8", errors="replace")
            except (OSError, ValueError, RuntimeError):
                log = ""
            try:
                parsed = parse_log(self.log_parser, log)
                status = "ok" if parsed else "empty"
            except UnparsableLog:
                parsed, status = {}, "invalid"
            statuses = {t: normal_status(s) or "error" for t, s in parsed.items()}
            failed = {t for t, s in statuses.items() if s in ("failed", "error")}
            timed_out = done.timed_out or "exit=137" in done.output
            return RunResult(statuses, failure_details(log, failed), timed_out, done.duration_s, status)
        finally:
            self.sandbox.reset()
