"""Diffs: per-file parsing, the source/test filter, and reversal, checked against real git."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from swebox.envs.tasks.graders.diff_parse import changed_paths, parse_diff
from swebox.envs.tasks.graders.diff_reverse import reverse_diff
from swebox.envs.tasks.graders.diffs import filter_diff, protected_reason


def _write(repo: Path, files: dict[str, str | bytes]) -> None:
    for name, data in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())


def _tree(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


@pytest.mark.parametrize(
    "path, reason",
    [
        ("pkg/core.py", ""),
        ("pkg/sub/util.py", ""),
        ("tests/test_core.py", "file in a test directory"),
        ("pkg/tests/helpers.py", "file in a test directory"),
        ("test_top.py", "test file"),
        ("pkg/core_test.py", "test file"),
        ("conftest.py", "conftest.py (pytest plugin)"),
        ("pkg/conftest.py", "conftest.py (pytest plugin)"),
        ("pytest.ini", "test configuration"),
        ("tox.ini", "test configuration"),
        ("setup.cfg", "test configuration"),
        ("pyproject.toml", "test configuration"),
        ("pkg/sitecustomize.py", "interpreter start-up hook"),
        ("usercustomize.py", "interpreter start-up hook"),
        ("src/evil.pth", "interpreter start-up hook"),
        ("venv/lib/python3.11/site-packages/x.py", "virtualenv or git metadata"),
        (".git/config", "virtualenv or git metadata"),
        ("pkg.egg-info/entry_points.txt", "packaging metadata (entry points can load pytest plugins)"),
        ("pkg/__pycache__/core.cpython-311.pyc", "compiled bytecode"),
        ("_pytest/runner.py", "module name that shadows the test runner"),
        ("src/pytest.py", "module name that shadows the test runner"),
        ("../outside.py", "path outside the repository"),
        ("/etc/passwd", "path outside the repository"),
        ("pytest.toml", "test configuration"),
        (".pytest.toml", "test configuration"),
        ("pkg/.coveragerc", "test configuration"),
        ("bin/test", "test configuration"),
        (".gitignore", "git control file (changes what git reports as changed)"),
        ("pkg/.gitattributes", "git control file (changes what git reports as changed)"),
        ("conftest.py\r", "control character in the path"),
        ("pkg/a\tb.py", "control character in the path"),
    ],
)
def test_protected_paths(path, reason):
    assert protected_reason(path) == reason


def test_task_named_test_files_are_protected_wherever_they_live():
    assert protected_reason("pkg/checks.py", ["pkg/checks.py"]) == "test file named by the task"


def test_parse_every_kind_of_section_and_reassemble_exactly(repo, diff_of):
    _write(
        repo,
        {
            "a.py": "1\n2\n3\n",
            "gone.py": "x\n",
            "old name.py": "r\ns\nt\nu\n",
            "img.bin": bytes(range(256)),
            "nonl.py": "no newline",
        },
    )
    (repo / "a.py").chmod(0o644)

    def change(r: Path) -> None:
        _write(
            r,
            {
                "a.py": "1\nTWO\n3\n",
                "fresh.py": "new\n",
                "img.bin": bytes(range(255, -1, -1)),
                "nonl.py": "still none",
            },
        )
        (r / "gone.py").unlink()
        (r / "old name.py").rename(r / "new name.py")
        (r / "a.py").chmod(0o755)
        os.symlink("a.py", r / "link.py")

    text = "From: someone\nSubject: fix\n\n" + diff_of(repo, change)
    patches = parse_diff(text)
    by_path = {p.new_path or p.old_path: p for p in patches}
    assert sorted(by_path) == ["a.py", "fresh.py", "gone.py", "img.bin", "link.py", "new name.py", "nonl.py"]
    assert by_path["fresh.py"].old_path is None and by_path["gone.py"].new_path is None
    assert by_path["new name.py"].rename and by_path["new name.py"].old_path == "old name.py"
    assert by_path["img.bin"].binary and by_path["img.bin"].binary_data
    assert "120000" in by_path["link.py"].modes
    assert "".join(p.text for p in patches) == text[text.index("diff --git") :]
    assert changed_paths(text)[0] == "a.py"


def test_filter_drops_tests_configs_hooks_symlinks_and_renames_of_tests(repo, git, diff_of):
    _write(
        repo,
        {
            "pkg/core.py": "def f():\n    return 1\n",
            "tests/test_core.py": "def test_f():\n    pass\n",
            "pytest.ini": "[pytest]\n",
        },
    )

    def change(r: Path) -> None:
        _write(
            r,
            {
                "pkg/core.py": "def f():\n    return 2\n",
                "conftest.py": "x = 1\n",
                "pkg/sitecustomize.py": "import os\n",
                "pkg/evil.pth": "import os\n",
                "pytest.ini": "[pytest]\naddopts = -p no:python\n",
                "pkg/img.png": b"\x89PNG\x00\x01",
            },
        )
        (r / "tests/test_core.py").rename(r / "pkg/moved.py")
        os.symlink("../tests", r / "pkg/link")

    result = filter_diff(diff_of(repo, change))
    assert [p.new_path for p in result.kept] == ["pkg/core.py", "pkg/img.png"]
    dropped = dict(result.dropped)
    assert dropped["pkg/moved.py"] == "file in a test directory: tests/test_core.py"
    assert dropped["conftest.py"].startswith("conftest.py")
    assert dropped["pkg/sitecustomize.py"].startswith("interpreter start-up hook")
    assert dropped["pkg/evil.pth"].startswith("interpreter start-up hook")
    assert dropped["pytest.ini"].startswith("test configuration")
    assert dropped["pkg/link"] == "symlink"
    # what is kept applies cleanly, binary included
    (repo / "kept.diff").write_text(result.text)
    git(repo, "apply", "kept.diff")
    assert (repo / "pkg/core.py").read_text().endswith("return 2\n")
    assert (repo / "pkg/img.png").read_bytes() == b"\x89PNG\x00\x01"


def test_binary_without_data_is_dropped():
    text = "diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n"
    result = filter_diff(text)
    assert result.kept == [] and result.dropped == [("x.bin", "binary change without data (use git diff --binary)")]


def test_plain_unified_diff_and_lenient_hunk_counts():
    text = (
        "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n d\n"  # counts say 2 lines, 3 follow
        "--- a/pkg/n.py\n+++ b/pkg/n.py\n@@ -1 +1 @@\n-x\n+y\n"
    )
    patches = parse_diff(text)
    assert [p.new_path for p in patches] == ["pkg/m.py", "pkg/n.py"]
    assert patches[0].text.endswith(" d\n")


def test_quoted_paths():
    text = (
        'diff --git "a/pkg/caf\\303\\251.py" "b/pkg/caf\\303\\251.py"\nindex 1..2 100644\n'
        '--- "a/pkg/caf\\303\\251.py"\n+++ "b/pkg/caf\\303\\251.py"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    assert parse_diff(text)[0].new_path == "pkg/café.py"


def test_reverse_undoes_every_kind_of_change(repo, git, diff_of):
    _write(
        repo,
        {
            "a.py": "".join(f"{i}\n" for i in range(20)),
            "gone.py": "x\n",
            "old.py": "r\ns\nt\nu\n",
            "img.bin": bytes(range(256)),
            "nonl.py": "no newline",
        },
    )
    before = _tree(repo)

    def change(r: Path) -> None:
        _write(
            r,
            {
                "a.py": "".join(f"{i * 2 if i % 7 == 0 else i}\n" for i in range(22)),
                "fresh.py": "new\n",
                "img.bin": bytes(range(100)),
                "nonl.py": "none\nstill",
            },
        )
        (r / "gone.py").unlink()
        (r / "old.py").rename(r / "new.py")
        (r / "a.py").chmod(0o755)

    forward = diff_of(repo, change)
    git(repo, "apply", "--binary", input=forward.encode())
    git(repo, "apply", "--binary", input=reverse_diff(forward).encode())
    assert _tree(repo) == before
    assert os.access(repo / "a.py", os.X_OK) is False
    # reversing twice gives back a diff with the same effect and the same text for text hunks
    assert reverse_diff(reverse_diff(forward)).replace("index ", "").count("@@") == forward.count("@@")


def test_reverse_orders_removals_before_additions():
    forward = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    assert reverse_diff(forward) == "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n-B\n+b\n c\n"


def test_a_binary_patch_ends_where_git_ends_it():
    # git closes a binary patch after its (at most two) blocks; what follows is a section of its own
    binary = (
        "diff --git a/d.bin b/d.bin\nnew file mode 100644\nindex 0000000..0f49c4a\n"
        "GIT binary patch\nliteral 9\nQcmZQzWJ=1+ODw7c00^)Gi2wiq\n\nliteral 0\nHcmV?d00001\n\n"
    )
    smuggled = "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n"
    sections = parse_diff(binary + smuggled)
    assert [(p.new_path, p.binary) for p in sections] == [("d.bin", True), ("conftest.py", False)]
    assert sections[0].text == binary
    assert [p for p, _ in filter_diff(binary + smuggled).dropped] == ["conftest.py"]


@pytest.mark.parametrize("mode, kept", [("0120000", False), ("120000", False), ("160000", False), ("0100644", True)])
def test_file_modes_are_read_as_git_reads_them(mode, kept):
    diff = f"diff --git a/pkg/x b/pkg/x\nnew file mode {mode}\n--- /dev/null\n+++ b/pkg/x\n@@ -0,0 +1 @@\n+y\n"
    assert bool(filter_diff(diff).kept) is kept
