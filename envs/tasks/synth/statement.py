"""Problem statements for synthesised bugs, written from what a user would see: failing tests and errors.

A user reporting a regression names the tests that broke, pastes the assertion message and a short
traceback, and does not know which line is wrong. The statement is built the same way from the JUnit XML of
the failing run, and then made blind to the bug: traceback frames outside test files are dropped (pytest
prints the source line of every frame, which would be the mutated line), and any line that still contains
text of the changed lines is removed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from swebox.envs.tasks.synth.mutations import is_test_file
from swebox.envs.tasks.testids import Key

MAX_LISTED = 10
"""Failing test ids listed by name; the rest are counted."""
MAX_DETAILED = 3
"""Failures shown with their message and traceback."""
MAX_TRACEBACK_LINES = 20
"""Lines of one traceback kept (the end, where the error is)."""
MIN_HIDDEN_LENGTH = 6
"""Changed lines shorter than this (``pass``, ``else:``) are too common to be a clue and are not filtered."""

# pytest's --tb=short frame header: "path/to/file.py:123: in function_name"
_FRAME = re.compile(r"^(?P<path>\S[^:]*\.py):(?P<line>\d+): in (?P<func>\S+)$")


@dataclass(frozen=True)
class Failure:
    """One failing test as the JUnit XML reports it."""

    test_id: str
    """The pytest node id, e.g. 'tests/test_core.py::TestX::test_y'."""
    message: str
    """The failure's message attribute (exception type and text, or the assertion)."""
    details: str
    """The failure's text: pytest's traceback in the run's --tb style."""


def junit_details(xml: bytes) -> dict[Key, tuple[str, str]]:
    """(message, traceback text) of every failed or errored test case, keyed like ``junit.parse_junit``."""
    out: dict[Key, tuple[str, str]] = {}
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            child = case.find(tag)
            if child is not None:
                key = (case.get("classname", ""), case.get("name", ""))
                out.setdefault(key, (child.get("message") or "", child.text or ""))
    return out


def frames_in_tests(traceback: str) -> list[str]:
    """The traceback without frames in non-test files; ``E`` lines (the error itself) are kept."""
    kept: list[str] = []
    keep_frame = True
    for line in traceback.splitlines():
        frame = _FRAME.match(line)
        if frame:
            keep_frame = is_test_file(frame["path"])
            if keep_frame:
                kept.append(line)
            continue
        if line.startswith("E ") or line == "E" or keep_frame and line.strip():
            kept.append(line)
    return kept


def hidden_lines(diff: str) -> list[str]:
    """The text of every changed line of a unified diff (both sides), stripped, long enough to be a clue."""
    out = []
    for line in diff.split("\n"):  # git's lines: str.splitlines also breaks on \f, \x85, ...
        if line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        text = line[1:].strip()
        if len(text) >= MIN_HIDDEN_LENGTH:
            out.append(text)
    return out


def scrub(lines: Iterable[str], hidden: Sequence[str]) -> list[str]:
    """Lines that contain none of the hidden texts."""
    return [line for line in lines if not any(h in line for h in hidden)]


def problem_statement(project: str, failures: Sequence[Failure], passing: int, diff: str = "") -> str:
    """The issue text for a bug that makes ``failures`` fail while ``passing`` other tests still pass.

    ``diff`` is the bug (or its fix); no line of the statement contains text of its changed lines.
    """
    if not failures:
        raise ValueError("problem_statement: expected at least one failing test; found none. A task needs F2P.")
    hidden = hidden_lines(diff)
    ordered = sorted(failures, key=lambda f: f.test_id)
    count = len(ordered)
    noun = "test fails" if count == 1 else "tests fail"
    lines = [f"{count} {noun} in {project}:", ""]
    lines += [f"- `{f.test_id}`" for f in ordered[:MAX_LISTED]]
    if count > MAX_LISTED:
        lines.append(f"- ... and {count - MAX_LISTED} more")
    for failure in ordered[:MAX_DETAILED]:
        lines += ["", f"`{failure.test_id}` fails with:", ""]
        message = scrub(failure.message.strip().splitlines()[:3], hidden)
        if message:
            lines += [f"    {m}" for m in message]
            lines.append("")
        trace = scrub(frames_in_tests(failure.details), hidden)[-MAX_TRACEBACK_LINES:]
        if trace:
            lines += ["Traceback (test code only):", "```", *trace, "```"]
    lines += ["", f"The other {passing} tests I ran still pass. All of these tests should pass."]
    return "\n".join(lines) + "\n"
