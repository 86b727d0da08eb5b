"""Fixtures for the tasks tests: a small git repository the tests write themselves."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import calc


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """Run git in ``repo`` with a fixed identity; raise with its output on failure."""
    cmd = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args]
    proc = subprocess.run(cmd, cwd=repo, input=input, capture_output=True)
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty git repository on branch main."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def diff_of(repo: Path, change) -> str:
    """Commit the current tree, apply ``change(repo)``, return `git diff --binary` and reset to the commit."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base")
    change(repo)
    git(repo, "add", "-A")
    text = git(repo, "diff", "--cached", "--binary", "-M", "HEAD").decode()
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-qfdx")
    return text


@pytest.fixture(name="git")
def git_fixture():
    """The :func:`git` helper, for tests (test modules here are not a package, so they cannot import it)."""
    return git


@pytest.fixture(name="diff_of")
def diff_of_fixture():
    """The :func:`diff_of` helper."""
    return diff_of


# -- the calc project (tests/calc.py): its env layer is tests/conftest.py's session fixture calc_layer


@pytest.fixture
def calc_task():
    """A task over calc_layer: add is the bug; the other tests must keep passing."""
    return calc.calc_task(env=None, problem_statement="")


@pytest.fixture
def gold():
    """The calc fixes as diffs: {'add': ..., 'div': ...}."""
    return {"add": calc.GOLD_ADD, "div": calc.GOLD_DIV}


@pytest.fixture(params=["junit", "log"])
def graded_task(request, calc_task):
    """calc_task graded either way: swebox's JUnit grader, or the log grader (tamper tests run under both)."""
    return calc_task if request.param == "junit" else calc.calc_log_task(calc_task)
