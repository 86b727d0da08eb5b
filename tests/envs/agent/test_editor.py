"""str_replace_editor against an in-memory fake sandbox (exact expected outputs), plus the editor path of
ToolRunner. The same tool against the real sandbox: test_editor_sandbox.py."""

from __future__ import annotations

import posixpath
import shlex

import pytest
from swebox.envs.agent.actions import Action, ActionConfig
from swebox.envs.agent.editor import Editor, EditorError, number_lines, split_lines
from swebox.envs.agent.observations import ObservationConfig
from swebox.envs.agent.tools import ToolRunner
from swebox.envs.sandbox import ExecResult

from tests.envs.agent.fakes import exec_result


class FakeSandbox:
    """An in-memory filesystem that understands exactly the shell commands the editor sends."""

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.dirs: set[str] = {"/"}
        for path in self.files:
            self._add_parents(path)
        self.commands: list[str] = []
        self.fail_reads = False

    def _add_parents(self, path: str) -> None:
        parent = posixpath.dirname(path)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = posixpath.dirname(parent)

    def read_file(self, path: str) -> bytes:
        if self.fail_reads:
            raise OSError("sandbox is gone")
        return self.files[path]

    def write_file(self, path: str, data: bytes | str) -> None:
        assert posixpath.dirname(path) in self.dirs, f"write into a missing directory: {path}"
        self.files[path] = data.encode() if isinstance(data, str) else data

    def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        self.commands.append(command)
        words = shlex.split(command)
        if words[0] == "if":
            path = words[3]
            kind = "dir" if path in self.dirs else "file" if path in self.files else "missing"
            return exec_result(kind + "\n")
        if words[:2] == ["mkdir", "-p"]:
            self._add_parents(words[2] + "/x")  # the directory and every missing parent
            return exec_result("")
        if words[:2] == ["rm", "-f"]:
            self.files.pop(words[2], None)
            return exec_result("")
        if words[0] == "find":
            return exec_result("".join(p + "\n" for p in self._listing(words[1])))
        raise AssertionError(f"unexpected command {command!r}")

    def _listing(self, root: str) -> list[str]:
        found = []
        for path in self.files.keys() | self.dirs:
            rel = posixpath.relpath(path, root)
            parts = rel.split("/")
            if rel.startswith("..") or rel == "." or len(parts) > 2 or any(p.startswith(".") for p in parts):
                continue
            found.append(path)
        return sorted(found)


def make(files: dict[str, bytes]) -> tuple[Editor, FakeSandbox]:
    sandbox = FakeSandbox(files)
    return Editor(sandbox), sandbox


def test_line_helpers_split_on_newline_only_and_number_like_cat_n():
    assert split_lines("a\r\nb\n\nc") == ["a\r\n", "b\n", "\n", "c"]
    assert split_lines("") == []
    assert number_lines(["x\n", "y"], 9) == "     9\tx\n    10\ty"


def test_view_file_whole_and_ranges():
    editor, _ = make({"/testbed/a.py": b"x = 1\ny = 2\nz = 3\n"})
    assert editor.view("/testbed/a.py") == (
        "Here's the result of running `cat -n` on /testbed/a.py:\n     1\tx = 1\n     2\ty = 2\n     3\tz = 3"
    )
    expected = "Here's the result of running `cat -n` on /testbed/a.py (lines 2-3 of 3):\n     2\ty = 2\n     3\tz = 3"
    assert editor.view("/testbed/a.py", [2, -1]) == expected
    assert editor.view("/testbed/a.py", [2, 99]) == expected  # an end past the file is clamped


@pytest.mark.parametrize(
    ("view_range", "needle"),
    [([0, 2], "between 1 and 3"), ([4, 4], "between 1 and 3"), ([3, 2], "at least the first (3)")],
)
def test_view_bad_ranges_say_what_is_allowed(view_range, needle):
    editor, _ = make({"/testbed/a.py": b"x = 1\ny = 2\nz = 3\n"})
    with pytest.raises(EditorError, match=r"Invalid view_range") as info:
        editor.view("/testbed/a.py", view_range)
    assert needle in str(info.value)


def test_view_directory_two_levels_without_hidden_entries():
    editor, _ = make(
        {
            "/testbed/a.py": b"",
            "/testbed/pkg/b.py": b"",
            "/testbed/pkg/sub/deep.py": b"",
            "/testbed/.git/HEAD": b"",
            "/testbed/pkg/.hidden": b"",
        }
    )
    assert editor.view("/testbed") == (
        "Files and directories up to 2 levels deep in /testbed, excluding hidden items:\n"
        "/testbed/a.py\n/testbed/pkg\n/testbed/pkg/b.py\n/testbed/pkg/sub"
    )
    with pytest.raises(EditorError, match="applies to files only"):
        editor.view("/testbed", [1, 2])


def test_missing_and_relative_paths_are_explained():
    editor, _ = make({})
    with pytest.raises(EditorError, match=r"^The path /testbed/nope.py does not exist\.$"):
        editor.view("/testbed/nope.py")
    with pytest.raises(EditorError, match=r"not absolute; it must start with /\. Did you mean /testbed/a\.py\?"):
        editor.run({"command": "view", "path": "a.py"})


def test_create_makes_parents_refuses_overwrite_and_undo_removes():
    editor, sandbox = make({"/testbed/a.py": b"old\n"})
    assert editor.create("/testbed/new/dir/c.py", "print(1)\n") == "File created successfully at: /testbed/new/dir/c.py"
    assert sandbox.files["/testbed/new/dir/c.py"] == b"print(1)\n"
    with pytest.raises(EditorError, match="already exists as a file; `create` never overwrites"):
        editor.create("/testbed/a.py", "new\n")
    with pytest.raises(EditorError, match="already exists as a directory"):
        editor.create("/testbed/new", "x")
    assert sandbox.files["/testbed/a.py"] == b"old\n"
    assert editor.undo_edit("/testbed/new/dir/c.py") == (
        "Last edit to /testbed/new/dir/c.py undone: the file that `create` made was removed."
    )
    assert "/testbed/new/dir/c.py" not in sandbox.files


def test_str_replace_unique_match_edits_and_shows_a_snippet():
    text = "".join(f"line{i}\n" for i in range(1, 11))
    editor, sandbox = make({"/testbed/a.py": text.encode()})
    out = editor.str_replace("/testbed/a.py", "line6\n", "six\nSIX\n")
    assert sandbox.files["/testbed/a.py"] == text.replace("line6\n", "six\nSIX\n").encode()
    assert out == (
        "The file /testbed/a.py has been edited. "
        "Here's the result of running `cat -n` on a snippet of it:\n"
        "     2\tline2\n     3\tline3\n     4\tline4\n     5\tline5\n"
        "     6\tsix\n     7\tSIX\n     8\tline7\n"
        "     9\tline8\n    10\tline9\n    11\tline10\n"
        "Review the changes and make sure they are as expected; edit again if needed."
    )


def test_str_replace_zero_or_several_matches_changes_nothing_and_names_count_and_lines():
    editor, sandbox = make({"/testbed/a.py": b"x = 1\ny = 2\nx = 1\n"})
    with pytest.raises(EditorError) as many:
        editor.str_replace("/testbed/a.py", "x = 1", "x = 3")
    assert str(many.value) == (
        "No replacement was performed: old_str occurs 2 times in /testbed/a.py, at lines 1, 3. Include more "
        "surrounding lines in old_str so that it occurs exactly once."
    )
    with pytest.raises(EditorError, match="did not appear verbatim in /testbed/a.py"):
        editor.str_replace("/testbed/a.py", "  y = 2", "y = 5")  # indentation matters
    with pytest.raises(EditorError, match="occurs 2 times"):
        editor.str_replace("/testbed/a.py", "1\n", "")
    assert sandbox.files["/testbed/a.py"] == b"x = 1\ny = 2\nx = 1\n"
    with pytest.raises(EditorError, match="old_str is empty"):
        editor.str_replace("/testbed/a.py", "", "z")


def test_str_replace_counts_overlapping_matches_as_ambiguous():
    editor, _ = make({"/testbed/a.txt": b"aaa\n"})
    with pytest.raises(EditorError, match=r"occurs 2 times in /testbed/a.txt, at line 1\. "):
        editor.str_replace("/testbed/a.txt", "aa", "b")


def test_str_replace_keeps_other_bytes_exactly():
    original = b"s = '\xff\xfe'\r\nb = 1\r\n"  # invalid UTF-8 and CRLF line ends must survive the edit
    editor, sandbox = make({"/testbed/a.py": original})
    editor.str_replace("/testbed/a.py", "b = 1", "b = 2")
    assert sandbox.files["/testbed/a.py"] == b"s = '\xff\xfe'\r\nb = 2\r\n"


def test_insert_at_top_middle_and_after_a_last_line_without_newline():
    editor, sandbox = make({"/testbed/a.py": b"one\ntwo"})
    editor.insert("/testbed/a.py", 0, "zero")
    assert sandbox.files["/testbed/a.py"] == b"zero\none\ntwo"
    editor.insert("/testbed/a.py", 2, "one and a half\n")
    assert sandbox.files["/testbed/a.py"] == b"zero\none\none and a half\ntwo"
    out = editor.insert("/testbed/a.py", 4, "three")
    assert sandbox.files["/testbed/a.py"] == b"zero\none\none and a half\ntwo\nthree\n"
    assert out.splitlines()[1:6] == [
        "     1\tzero",
        "     2\tone",
        "     3\tone and a half",
        "     4\ttwo",
        "     5\tthree",
    ]
    with pytest.raises(EditorError, match=r"Invalid insert_line 7: /testbed/a.py has 5 lines"):
        editor.insert("/testbed/a.py", 7, "x")
    with pytest.raises(EditorError, match="Invalid insert_line -1"):
        editor.insert("/testbed/a.py", -1, "x")


def test_undo_edit_walks_back_each_file_separately():
    editor, sandbox = make({"/testbed/a.py": b"a1\n", "/testbed/b.py": b"b1\n"})
    editor.str_replace("/testbed/a.py", "a1", "a2")
    editor.str_replace("/testbed/b.py", "b1", "b2")
    editor.str_replace("/testbed/a.py", "a2", "a3")
    assert editor.undo_edit("/testbed/a.py") == (
        "Last edit to /testbed/a.py undone. Here's the result of running `cat -n` on /testbed/a.py:\n     1\ta2"
    )
    assert sandbox.files["/testbed/b.py"] == b"b2\n"
    editor.undo_edit("/testbed/a.py")
    assert sandbox.files["/testbed/a.py"] == b"a1\n"
    with pytest.raises(EditorError, match=r"^No edit history found for /testbed/a.py\.$"):
        editor.undo_edit("/testbed/a.py")


def test_edits_of_directories_missing_and_binary_files_are_refused():
    editor, _ = make({"/testbed/pkg/x.py": b"", "/testbed/blob.bin": b"\x00\x01\x02"})
    with pytest.raises(EditorError, match="/testbed/pkg is a directory; only existing files can be edited"):
        editor.str_replace("/testbed/pkg", "a", "b")
    with pytest.raises(EditorError, match="/testbed/none.py does not exist"):
        editor.insert("/testbed/none.py", 0, "a")
    with pytest.raises(EditorError, match="looks like a binary file"):
        editor.view("/testbed/blob.bin")


def test_runner_shows_editor_misuse_as_error_observation_and_sandbox_failure_as_error():
    sandbox = FakeSandbox({"/testbed/a.py": b"x\n"})
    runner = ToolRunner(sandbox, ActionConfig(style="xml_function"), ObservationConfig())
    misuse = runner.run(Action("str_replace_editor", {"command": "undo_edit", "path": "/testbed/a.py"}))
    assert misuse.observation == "Error: No edit history found for /testbed/a.py."
    assert misuse.error is None and not misuse.format_error and not misuse.submitted
    sandbox.fail_reads = True
    broken = runner.run(Action("str_replace_editor", {"command": "view", "path": "/testbed/a.py"}))
    assert broken.observation == "Error: Could not read /testbed/a.py: sandbox is gone"
    ok_reply = "<function=str_replace_editor><parameter=command>create</parameter>"
    ok_reply += "<parameter=path>/testbed/n.py</parameter><parameter=file_text>\nv = 1\n\n</parameter></function>"
    created = runner.step(ok_reply)
    assert created.observation == "File created successfully at: /testbed/n.py"
    assert sandbox.files["/testbed/n.py"] == b"v = 1\n"  # one newline after/before the tags is framing


def test_runner_caps_a_huge_view_to_the_observation_limit():
    big = "".join(f"line {i}\n" for i in range(5000)).encode()
    runner = ToolRunner(FakeSandbox({"/testbed/big.py": big}), observations=ObservationConfig(max_chars=1000))
    out = runner.run(Action("str_replace_editor", {"command": "view", "path": "/testbed/big.py"}), turns_left=2)
    assert len(out.observation) <= 1000
    assert "characters cut from the middle of the output" in out.observation
    assert out.observation.endswith("[2 turns left. Submit your changes before you run out of turns.]")
