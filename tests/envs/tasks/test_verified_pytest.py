"""SWE-bench Verified rows of pytest-dev/pytest: the repository under test is pytest itself.

Built as a user builds them: swebench's own recipe (Python 3.9, the pinned pluggy/py/attrs..., `pip install -e .`
at the base commit), a git mirror, `swebox cache build --git-mirror`, and the row's log grader (its test command
`pytest -rA testing/...`, SWE-bench's pytest parser, the canaries). GitHub is unreachable, so the mirror is made
from the sdist of the first pytest release with the row's fix: the fix and its tests taken back give the commit
tagged as the release before it (as upstream tags its releases), the row's base commit follows that tag, and its
setup commit adds the row's patch and test patch again. Python 3.9 is the machine's pyenv build, copied
where the sandbox can run it (tests/pyenv_python.py). Needs PyPI (the recipe's pins, setuptools_scm), like
tests/envs/tasks/test_verified_e2e.py.

What went wrong before: (1) the starting tree is a root commit without tags, so setuptools_scm installed pytest as
``0.1.dev1``, pytest's own tox.ini (``minversion = 2.0``) stopped the run with ``ERROR: ... requires
pytest-2.0``, and the parser read that line as the only result: every test "missing", canaries "reported
missing", gold unresolved; (2) the diff filter dropped every change under ``src/_pytest/`` as a "module name that
shadows the test runner", so the gold patch was never applied (all 19 pytest rows of Verified).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from swebox.envs.cache.checkout import nearest_tag
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks import load
from swebox.envs.tasks.graders.diffs import filter_diff, own_modules
from swebox.envs.tasks.graders.grading import grade, protected_files
from swebox.envs.tasks.validate import StoreLayers

from tests.pyenv_python import readable_python
from tests.sdist_env import sdist

VERIFIED = Path(os.environ.get("SWEBOX_VERIFIED_PARQUET", "/work/shared/data/swe-bench-verified.parquet"))
ROWS = {
    "pytest-dev__pytest-5809": ("4.6.6", "4.6.5", "testing/test_pastebin.py"),
    "pytest-dev__pytest-7571": ("6.0.1", "6.0.0", "testing/logging/test_fixture.py"),
}
"""Row -> (the first release with its fix, whose sdist makes the mirror; the tag nearest its base commit; the
test file SWE-bench's directives name)."""


def _git(repo: Path, *args: str, data: str | None = None) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, input=data).stdout


def _mirror_of_release(tmp_path: Path, version: str, tag: str, row: dict) -> tuple[Path, str, str]:
    """A bare mirror holding: the release without the fix (tagged ``tag``), the base commit after it, the setup
    commit with the fix."""
    with tarfile.open(sdist("pytest", version)) as tar:
        tar.extractall(tmp_path, filter="data")
    work = tmp_path / f"pytest-{version}"
    shutil.rmtree(work / "src" / "pytest.egg-info", ignore_errors=True)
    (work / "PKG-INFO").unlink()  # sdist metadata, not in the repository
    _git(work, "init", "-q", "-b", "main")
    _git(work, "apply", "-R", "-", data=row["test_patch"])
    _git(work, "apply", "-R", "-", data=row["patch"])
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", f"pytest {tag}")
    _git(work, "tag", tag)
    (work / "changelog" / "9999.trivial.rst").write_text("A commit after the release.\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "after the release")
    base = _git(work, "rev-parse", "HEAD").strip()
    _git(work, "apply", "-", data=row["patch"])
    _git(work, "apply", "-", data=row["test_patch"])
    _git(work, "commit", "-qam", "the fix")
    setup = _git(work, "rev-parse", "HEAD").strip()
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "pytest-dev__pytest.git")], check=True)
    return mirror, base, setup


def test_no_verified_gold_patch_of_pytest_loses_a_section_to_the_filter():
    if not VERIFIED.exists():
        pytest.skip("needs the Verified parquet")
    tasks = [t for t in load(VERIFIED) if t.repo == "pytest-dev/pytest"]
    assert len(tasks) == 19
    for task in tasks:
        assert filter_diff(task.patch, protected_files(task), own_modules(task.repo)).dropped == [], task.instance_id
    # in any other repository a _pytest or pytest module still shadows the runner
    shadow = (
        "diff --git a/src/_pytest/x.py b/src/_pytest/x.py\n--- a/src/_pytest/x.py\n+++ b/src/_pytest/x.py\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    assert filter_diff(shadow, (), own_modules("pallets/flask")).dropped[0][1].startswith("module name that shadows")
    assert filter_diff(shadow.replace("_pytest/x.py", "pytest.py"), (), own_modules("pytest-dev/pytest")).dropped == []
    assert filter_diff(shadow.replace("_pytest", "pluggy"), (), own_modules("pytest-dev/pytest")).dropped


def test_nearest_tag_is_the_latest_version_tag_reachable(tmp_path):
    def git(*args: str) -> str:
        return _git(tmp_path, *args)

    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "one")
    assert nearest_tag(tmp_path, "HEAD") == ""  # no tags: none
    git("tag", "v1.0")
    git("commit", "-q", "--allow-empty", "-m", "two")
    git("tag", "docs-only")  # no digit: not a version tag
    git("commit", "-q", "--allow-empty", "-m", "three")
    assert nearest_tag(tmp_path, "HEAD") == "v1.0"
    git("tag", "-a", "-m", "release", "1.1")
    assert nearest_tag(tmp_path, "HEAD") == "1.1"
    assert nearest_tag(tmp_path, "HEAD~1") == "v1.0"


@pytest.mark.e2e
@pytest.mark.parametrize("instance_id", sorted(ROWS))
def test_pytest_rows_grade_under_their_own_pytest(instance_id, tmp_path, monkeypatch):
    if shutil.which("mksquashfs") is None or not VERIFIED.exists():
        pytest.skip("needs mksquashfs and the Verified parquet")
    pq = pytest.importorskip("pyarrow.parquet")
    python39 = readable_python("3.9")
    row = next(r for r in pq.read_table(VERIFIED).to_pylist() if r["instance_id"] == instance_id)
    version, tag, test_file = ROWS[instance_id]
    mirror, base, setup = _mirror_of_release(tmp_path, version, tag, row)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row | {"base_commit": base, "environment_setup_commit": setup}) + "\n")
    store = tmp_path / "store"
    monkeypatch.delenv("SWEBOX_SWE_SPECS", raising=False)
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node"))
    env = {**os.environ, "SWEBOX_LAYER_CACHE": str(tmp_path / "node"), "SWEBOX_PYTHONS": str(python39)}
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "swebox.scripts.cli",
            "cache",
            "--store",
            str(store),
            "build",
            "--tasks",
            str(rows),
            "--git-mirror",
            str(mirror),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert built.returncode == 0, built.stdout + built.stderr

    (task,) = load(rows)
    assert task.env.python == "3.9" and task.grader == "log" and task.log_parser == "pytest-dev/pytest"
    assert task.test_cmd == f"pytest -rA {test_file}"
    layers = StoreLayers(store)
    try:
        paths = layers(task)
        with Sandbox(paths) as sb:
            seen = sb.exec(
                "cd /testbed && git tag --points-at HEAD && git rev-list --count HEAD && "
                "/venv/bin/python -c 'import pytest; print(pytest.__version__)'"
            ).output.split()
        # the release's tag on the one root commit, and the version the install derived from it
        assert seen == [tag, "1", tag], seen
        empty = grade(task, "", layers=paths, timeout=600)
        gold = grade(task, task.patch, layers=paths, timeout=600)
    finally:
        layers.close()
    assert gold.log_status == "ok" and not gold.errors and not gold.tampered, (
        gold.errors,
        gold.tampered,
        gold.output_tail,
    )
    assert gold.resolved and {o.status for o in gold.tests.values()} == {"passed"}, (gold.tests, gold.output_tail)
    assert empty.log_status == "ok" and not empty.tampered and not empty.resolved, (empty.tampered, empty.output_tail)
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed"]
    assert empty.p2p_passed == empty.p2p_total == len(task.PASS_TO_PASS)
