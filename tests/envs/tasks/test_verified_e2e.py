"""A real SWE-bench Verified row with swebench's own recipe, built here from a local git mirror.

pallets__flask-5014 is the one Verified row of Flask; its recipe (swebench 4.1.0, flask 2.3) needs Python
3.11, which this machine has. GitHub is unreachable, so the mirror is made from flask 2.3.3's sdist (which
contains the fix): the row's patch and test_patch reversed give its base commit, reverting that commit gives
its setup commit. The row is the parquet's, with those two commit ids. `swebox cache build --git-mirror`
builds the env with the recipe (requirements/dev.txt, the pinned pip packages) and the start at the base
commit (`pip install -e .` there); the verdict comes from swebox's junit grader on the row's test ids (the
row's own grader is the log one, tested with it): the empty diff does not resolve, the gold patch does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks import load
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.validate import StoreLayers

pytestmark = pytest.mark.e2e
VERIFIED = Path("/work/shared/data/swe-bench-verified.parquet")


def _git(repo: Path, *args: str, data: str | None = None) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, input=data).stdout


def test_pallets_flask_5014_starts_at_its_base_commit_with_its_recipe(tmp_path, monkeypatch):
    if shutil.which("mksquashfs") is None or not VERIFIED.exists():
        pytest.skip("needs mksquashfs and the Verified parquet")
    pq = pytest.importorskip("pyarrow.parquet")
    row = next(r for r in pq.read_table(VERIFIED).to_pylist() if r["instance_id"] == "pallets__flask-5014")
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            "flask",
            "flask==2.3.3",
            "-d",
            str(tmp_path / "sdist"),
        ],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stderr
    with tarfile.open(tmp_path / "sdist" / "flask-2.3.3.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    work = tmp_path / "flask-2.3.3"
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "flask 2.3.3")
    _git(work, "apply", "-R", "-", data=row["patch"])
    _git(work, "apply", "-R", "-", data=row["test_patch"])
    _git(work, "commit", "-qam", "before pallets/flask#5014")
    base = _git(work, "rev-parse", "HEAD").strip()
    _git(work, "revert", "--no-edit", "HEAD")
    setup = _git(work, "rev-parse", "HEAD").strip()
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "pallets__flask.git")], check=True)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row | {"base_commit": base, "environment_setup_commit": setup}) + "\n")
    store = tmp_path / "store"
    monkeypatch.delenv("SWEBOX_SWE_SPECS", raising=False)
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node"))
    env = {**os.environ, "SWEBOX_LAYER_CACHE": str(tmp_path / "node")}
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
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout + built.stderr

    (task,) = load(rows)
    assert task.env.python == "3.11" and "requirements/dev.txt" in task.env.install[0]
    assert task.test_cmd == "pytest -rA tests/test_blueprints.py" and task.log_parser == "pallets/flask"
    layers = StoreLayers(store)
    try:
        paths = layers(task)
        with Sandbox(paths) as sb:
            assert "may not be empty" not in sb.exec("cat /testbed/src/flask/blueprints.py").output  # base's tree
            where = sb.exec(
                "cd / && /venv/bin/python -c 'import flask, werkzeug; print(flask.__file__, werkzeug.__version__)'"
            ).output.split()
            assert where == ["/testbed/src/flask/__init__.py", "2.3.7"]  # installed at base; the recipe's pin
        junit = dataclasses.replace(task, grader="junit", log_parser="", test_cmd="/venv/bin/python -m pytest")
        empty = grade(junit, "", layers=paths, timeout=600)
        gold = grade(junit, task.patch, layers=paths, timeout=600)
    finally:
        layers.close()
    assert not empty.resolved and empty.f2p_passed == 0 and empty.p2p_passed == empty.p2p_total > 50, empty
    assert gold.resolved and gold.f2p_passed == 1, gold
