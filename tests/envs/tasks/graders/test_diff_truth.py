"""git's reading of diffs against the filter's, with the real git (on the host: parsing needs no sandbox)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from swebox.envs.tasks.graders import diff_parse
from swebox.envs.tasks.graders.diff_parse import parse_diff
from swebox.envs.tasks.graders.diff_truth import disagreement, judge, read_with_git, refusal
from swebox.envs.tasks.graders.diffs import FilteredDiff, filter_diff


@dataclass
class _Result:
    output: str
    exit_code: int


class HostGit:
    """Runs diff_truth's commands in a local repository standing in for /testbed."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo

    def exec(self, command: str, timeout: float) -> _Result:
        proc = subprocess.run(
            command.replace("cd /testbed", f"cd {self.repo}"), shell=True, capture_output=True, timeout=timeout
        )
        return _Result(proc.stdout.decode(errors="replace"), proc.returncode)

    def write_file(self, path: str, data: bytes) -> None:
        Path(path).write_bytes(data)


BINARY = (
    "diff --git a/d.bin b/d.bin\nnew file mode 100644\n"
    "index 0000000000000000000000000000000000000000..0f49c4ae77b43dff338093c78e009676e7e308ba\n"
    "GIT binary patch\nliteral 9\nQcmZQzWJ=1+ODw7c00^)Gi2wiq\n\nliteral 0\nHcmV?d00001\n\n"
)
PLAIN = "--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n"
RENAME = "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"


def _reading(repo: Path, text: str):
    (repo / "p.diff").write_text(text)
    return read_with_git(HostGit(repo), str(repo / "p.diff"))


def test_git_and_the_filter_agree_on_ordinary_diffs(repo):
    text = PLAIN.format(path="pkg/mod.py") + BINARY + RENAME
    reading = _reading(repo, text)
    assert sorted(reading.paths) == ["d.bin", "new.py", "pkg/mod.py"]
    assert sorted(reading.old_paths) == ["d.bin", "old.py", "pkg/mod.py"]
    assert disagreement(text, reading) == "" and refusal(reading, []) == ""


@pytest.mark.parametrize(
    "text, expected",
    [
        # git drops the CR: it creates conftest.py where the filter saw 'conftest.py\r'
        (PLAIN.format(path="conftest.py\r"), "git reads the diff's sections differently"),
        # a corrupt binary patch: git stops there (exit 0) and silently skips the sections after it
        (PLAIN.format(path="a.py") + BINARY.replace("QcmZQz", "QcmZQy") + RENAME, "git reads the diff's sections"),
        # after a header-only rename, git reads a plain ---/+++ pair as part of the rename: it refuses it
        (RENAME + PLAIN.format(path="pkg/mod.py"), "git cannot read the diff"),
    ],
    ids=["cr-path", "corrupt-binary", "unreadable"],
)
def test_a_diff_git_reads_differently_is_refused(repo, text, expected):
    assert disagreement(text, _reading(repo, text)).startswith(expected)


def test_what_git_would_touch_is_judged_by_the_filter_rules(repo):
    reading = _reading(repo, PLAIN.format(path="tests/test_x.py"))
    assert refusal(reading, []) == "git would change a protected path: file in a test directory: 'tests/test_x.py'"
    link = "diff --git a/l b/l\nnew file mode 0120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n"
    assert refusal(_reading(repo, link), []) == "a section writes a symlink (mode 120000)"
    assert filter_diff(link).kept == []  # the filter reads the leading zero the same way


def test_text_without_sections_is_not_refused(repo):
    assert disagreement("just prose\n", _reading(repo, "just prose\n")) == ""


# -- issue 31, class 5: one parse of a diff, git's -------------------------------------------------------------
SEPARATORS = ["\r", "\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
"""What str.splitlines breaks a line on besides \\n; git breaks on \\n only."""
CUT = (
    "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,5 @@\n a = 1\n b = 2\n+c = 3\n+# n{sep}x\n"
    "+d = 4\ndiff --git a/r.md b/r.md\nindex 1111111..2222222 100644\n--- a/r.md\n+++ b/r.md\n"
    "@@ -1 +1 @@\n-r\n+r!\n"
)


def _base(repo: Path, git) -> None:
    (repo / "m.py").write_text("a = 1\nb = 2\n")
    (repo / "r.md").write_text("r\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_line_breaks_only_at_newline_as_in_git(repo, git, sep):
    _base(repo, git)
    text = CUT.format(sep=sep)
    sections = parse_diff(text)
    assert [(p.paths, p.added, p.removed) for p in sections] == [(("m.py",), 3, 0), (("r.md",), 1, 1)]
    assert filter_diff(text).text == text  # nothing cut, nothing glued
    reading = _reading(repo, text)
    assert reading.counts == [("3", "0"), ("1", "1")] and disagreement(text, reading) == ""


def test_the_cross_check_compares_line_counts_not_only_paths(repo, git, monkeypatch):
    _base(repo, git)
    # git ends the hunk at the bare CR line (its recount gives up; the header's counts stand), the filter not
    text = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a = 1\n+a = 0\n\r\n+a = 5\n"
    reading = _reading(repo, text)
    assert reading.paths == ["m.py"] and reading.counts == [("1", "1")]
    assert disagreement(text, reading).startswith("git reads the diff's sections differently from the filter (counts)")
    # a splitting bug like the old one (str.splitlines) is caught by the counts even where every path agrees
    monkeypatch.setattr(diff_parse, "diff_lines", lambda t: t.splitlines(keepends=True))
    cut = CUT.format(sep="\f")
    assert sorted(p.new_path for p in parse_diff(cut)) == sorted(_reading(repo, cut).paths)
    assert "(counts)" in disagreement(cut, _reading(repo, cut))


def test_modes_are_compared_section_by_section(repo, git):
    (repo / "g").write_text("x\n")
    _base(repo, git)
    change = "diff --git a/g b/g\nold mode 100644\nnew mode 100755\n"
    reading = _reading(repo, change)
    assert reading.summary == ["change 100644 100755"] and disagreement(change, reading) == ""
    new = "diff --git a/h b/h\nnew file mode 100755\n--- /dev/null\n+++ b/h\n@@ -0,0 +1 @@\n+y\n"
    assert _reading(repo, new).summary == ["create 100755"] and disagreement(new, _reading(repo, new)) == ""
    # a section the filter reads without a mode change and git with one is refused
    same = parse_diff(change.replace("100755", "100644"))
    assert "(summary)" in disagreement(change, _reading(repo, change), same)


def test_kept_sections_that_run_into_each_other_once_joined_are_refused(repo, git, tmp_path):
    _base(repo, git)
    text = CUT.format(sep="\f")
    first, second = parse_diff(text)
    assert judge(HostGit(repo), str(tmp_path), text, filter_diff(text), []) == ""
    # a section that does not end its last line (what the old splitter made at a form feed) glues the next
    # section's `diff --git` line onto its own last line
    first.text = first.text[: first.text.index("\f") + 1]
    glued = FilteredDiff(first.text + second.text, [first, second])
    assert judge(HostGit(repo), str(tmp_path), text, glued, []).startswith("the filtered diff's sections read")
