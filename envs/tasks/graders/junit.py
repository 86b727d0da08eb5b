"""Reading pytest's JUnit XML robustly: results come from this file, never from terminal text.

The file is written by a process that ran untrusted code, so anything can be wrong with it: missing (the
run crashed or timed out), empty, not valid UTF-8, cut off mid-element, or not XML at all. Each case gets
its own ``status`` so a grade report can say what happened; what could be read before a truncation is kept.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from xml.parsers.expat import errors as expat_errors

from swebox.envs.tasks.testids import Key

PASSED, FAILED, ERROR, SKIPPED, XFAILED, MISSING = (
    "passed",
    "failed",
    "error",
    "skipped",
    "xfailed",
    "missing",
)
PASSING = frozenset({PASSED, XFAILED})
"""Statuses that count as a pass (SWE-bench counts an expected failure as passing)."""
_WORST = {ERROR: 4, FAILED: 3, SKIPPED: 2, XFAILED: 1, PASSED: 0}
# XML 1.0 cannot hold these even as character references; a crashing test can still print them.
_INVALID_XML_CHARS = re.compile(r"&#(?:x0*(?:[0-8bBcCeEfF]|1[0-9a-fA-F])|0*(?:[0-8]|1[1249]|2[0-9]|3[01]));")


@dataclass
class TestResult:
    """One test as the JUnit file reports it."""

    __test__ = False  # not a pytest test class, despite the name

    classname: str
    """pytest's classname: dotted file path plus classes."""
    name: str
    """Function name with its [params]."""
    status: str
    """passed | failed | error | skipped | xfailed."""
    duration_s: float = 0.0
    """Wall time pytest measured (setup + call + teardown)."""
    message: str = ""
    """First line of the failure/error/skip message (truncated to 500 characters)."""
    file: str = ""
    """Repository-relative file (xunit1 reports only)."""


@dataclass
class JUnitReport:
    """What a JUnit file said, and whether it could be read completely."""

    status: str
    """ok | missing | empty | invalid | truncated."""
    results: dict[Key, TestResult] = field(default_factory=dict)
    """Per-test results keyed by (classname, name); a name seen twice keeps its worst status."""
    error: str = ""
    """Why the file could not be read completely ('' when status is ok)."""
    decode_errors: bool = False
    """True when the bytes were not valid UTF-8 and were decoded with replacement characters."""


def _status_of(case: ET.Element) -> tuple[str, str]:
    for tag, status in (("error", ERROR), ("failure", FAILED), ("skipped", SKIPPED)):
        child = case.find(tag)
        if child is None:
            continue
        message = child.get("message") or (child.text or "")
        if status == SKIPPED and (child.get("type") == "pytest.xfail"):
            status = XFAILED
        return status, message.strip().splitlines()[0][:500] if message.strip() else ""
    return PASSED, ""


def _add(results: dict[Key, TestResult], case: ET.Element) -> None:
    status, message = _status_of(case)
    try:
        duration = float(case.get("time") or 0.0)
    except ValueError:
        duration = 0.0
    result = TestResult(
        case.get("classname", ""), case.get("name", ""), status, duration, message, case.get("file", "")
    )
    key = (result.classname, result.name)
    old = results.get(key)
    if old is None or _WORST[status] > _WORST[old.status]:
        if old is not None:
            result.duration_s += old.duration_s
        results[key] = result
    else:
        old.duration_s += duration


def _clean_text(data: bytes) -> tuple[str, bool]:
    try:
        text, bad = data.decode("utf-8"), False
    except UnicodeDecodeError:
        text, bad = data.decode("utf-8", errors="replace"), True
    # The declaration names an encoding; we have already decoded, so it must not be applied again.
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text)
    text = _INVALID_XML_CHARS.sub("\ufffd", text)
    return text, bad


def parse_junit(data: bytes | None) -> JUnitReport:
    """Parse a JUnit XML document (None = the file does not exist); never raises on bad content."""
    if data is None:
        return JUnitReport(MISSING, error="the JUnit XML file was not written (crash, timeout or tampering)")
    if not data.strip():
        return JUnitReport("empty", error="the JUnit XML file is empty")
    text, bad = _clean_text(data)
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("end",))
    results: dict[Key, TestResult] = {}
    try:
        parser.feed(text)
        for elem in _ended(parser.read_events()):
            if elem.tag == "testcase":
                _add(results, elem)
        parser.close()
    except ET.ParseError as exc:
        # Keep every <testcase> that closed before the error: a truncated file still says something.
        for elem in _drain(parser):
            if elem.tag == "testcase":
                _add(results, elem)
        at_end = _error_at_end(exc, text)
        return JUnitReport(
            "truncated" if at_end else "invalid",
            results,
            f"the JUnit XML file is {'cut off' if at_end else 'not well-formed'}: {exc}",
            bad,
        )
    return JUnitReport("ok", results, decode_errors=bad)


def _ended(events: Iterable[tuple[Any, ...]]) -> Iterator[ET.Element]:
    """The elements of the parser's events: it asks for "end" events only, whose item is always an Element
    (typeshed types read_events() with every kind of event)."""
    for _, elem in events:
        if isinstance(elem, ET.Element):
            yield elem


def _drain(parser: ET.XMLPullParser) -> list[ET.Element]:
    try:
        return list(_ended(parser.read_events()))
    except ET.ParseError:
        return []


# expat's codes (by number, not by message) for a document that stops early: no root element yet, a tag cut off
_CUT_OFF = frozenset(
    expat_errors.codes[e] for e in (expat_errors.XML_ERROR_NO_ELEMENTS, expat_errors.XML_ERROR_UNCLOSED_TOKEN)
)


def _error_at_end(exc: ET.ParseError, text: str) -> bool:
    """A parse error on the document's last line means the writer stopped early (a truncation)."""
    line = exc.position[0]
    return exc.code in _CUT_OFF or line >= text.rstrip().count("\n") + 1
