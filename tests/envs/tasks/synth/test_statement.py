"""Problem statements: what a user would report, never the changed line or the fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from swebox.envs.tasks.synth.statement import (
    Failure,
    frames_in_tests,
    hidden_lines,
    junit_details,
    problem_statement,
    scrub,
)

TRACE = textwrap.dedent("""\
    tests/test_stack.py:12: in test_peek
        assert stack.peek() == 3
    src/stack/core.py:40: in peek
        return self.items[len(self.items) - 2]
    E   IndexError: list index out of range
""")

DIFF = textwrap.dedent("""\
    diff --git a/src/stack/core.py b/src/stack/core.py
    --- a/src/stack/core.py
    +++ b/src/stack/core.py
    @@ -40 +40 @@
    -        return self.items[len(self.items) - 2]
    +        return self.items[len(self.items) - 1]
""")


def test_frames_outside_test_files_are_dropped():
    assert frames_in_tests(TRACE) == [
        "tests/test_stack.py:12: in test_peek",
        "    assert stack.peek() == 3",
        "E   IndexError: list index out of range",
    ]


def test_hidden_lines_take_both_sides_and_skip_short_ones():
    diff = DIFF + "@@ -50 +50 @@\n-        else:\n+        pass\n"
    assert hidden_lines(diff) == [
        "return self.items[len(self.items) - 2]",
        "return self.items[len(self.items) - 1]",
    ]


def test_scrub_removes_lines_containing_hidden_text():
    assert scrub(["a = f(x)", "E  assert g(y) == 2", "ok"], ["f(x)", "g(y)"]) == ["ok"]


def test_statement_lists_failures_messages_and_test_frames():
    failures = [
        Failure("tests/test_stack.py::test_peek", "IndexError: list index out of range", TRACE),
        Failure("tests/test_stack.py::test_len", "assert 1 == 2", "E   assert 1 == 2\n"),
    ]
    text = problem_statement("stack", failures, passing=40, diff=DIFF)
    assert text == textwrap.dedent("""\
        2 tests fail in stack:

        - `tests/test_stack.py::test_len`
        - `tests/test_stack.py::test_peek`

        `tests/test_stack.py::test_len` fails with:

            assert 1 == 2

        Traceback (test code only):
        ```
        E   assert 1 == 2
        ```

        `tests/test_stack.py::test_peek` fails with:

            IndexError: list index out of range

        Traceback (test code only):
        ```
        tests/test_stack.py:12: in test_peek
            assert stack.peek() == 3
        E   IndexError: list index out of range
        ```

        The other 40 tests I ran still pass. All of these tests should pass.
    """)
    assert "len(self.items)" not in text


def test_statement_counts_beyond_the_listed_and_detailed_limits():
    failures = [Failure(f"tests/test_a.py::test_{i:02d}", "boom", "E   boom\n") for i in range(13)]
    text = problem_statement("proj", failures, passing=1)
    assert text.startswith("13 tests fail in proj:")
    assert "- ... and 3 more" in text
    assert text.count("fails with:") == 3
    assert "test_12" not in text


def test_statement_needs_a_failure():
    with pytest.raises(ValueError, match="at least one failing test"):
        problem_statement("proj", [], passing=3)


def test_junit_details_reads_failures_and_errors():
    xml = b"""<?xml version="1.0"?><testsuites><testsuite>
      <testcase classname="tests.test_a" name="test_ok"/>
      <testcase classname="tests.test_a" name="test_bad">
        <failure message="assert 1 == 2">E   assert 1 == 2</failure></testcase>
      <testcase classname="tests.test_a.TestX" name="test_err">
        <error message="fixture boom">trace</error></testcase>
    </testsuite></testsuites>"""
    assert junit_details(xml) == {
        ("tests.test_a", "test_bad"): ("assert 1 == 2", "E   assert 1 == 2"),
        ("tests.test_a.TestX", "test_err"): ("fixture boom", "trace"),
    }
    assert junit_details(b"<not xml") == {}


def test_real_pytest_failure_never_leaks_the_mutated_line(tmp_path):
    """A real pytest run (tb=short): the source frame with the buggy line is in the JUnit text, not in the
    statement."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    buggy = "    return sorted(values)[len(values) // 2 + 1]"
    (tmp_path / "pkg" / "stats.py").write_text(f"def median(values):\n{buggy}\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_stats.py").write_text(
        "from pkg.stats import median\n\n"
        "def test_median_odd():\n    assert median([3, 1, 2]) == 2\n\n"
        "def test_median_single():\n    assert median([5]) == 5\n"
    )
    xml_path = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--tb=short",
            f"--junitxml={xml_path}",
            "-o",
            "junit_family=xunit1",
            "tests",
        ],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    details = junit_details(xml_path.read_bytes())
    assert set(details) == {
        ("tests.test_stats", "test_median_odd"),
        ("tests.test_stats", "test_median_single"),
    }
    assert any(buggy.strip() in text for _, text in details.values())  # pytest did print the source frame
    failures = [Failure(f"tests/test_stats.py::{name}", msg, text) for (_, name), (msg, text) in details.items()]
    diff = f"--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -2 +2 @@\n-{buggy}\n+{buggy.replace(' + 1', '')}\n"
    text = problem_statement("pkg", failures, passing=0, diff=diff)
    assert "tests/test_stats.py::test_median_single" in text
    assert "IndexError" in text
    assert "len(values)" not in text
    assert "stats.py:2" not in text
