"""End to end: a real project with real history in a local git mirror, rows in the datasets' exact formats,
`swebox cache build --git-mirror` and `swebox tasks validate`: every row passes (gold resolves, empty does not).

The project is toolz 1.0.0's sdist from PyPI, committed twice: first with a bug in ``frequencies`` (the
SWE-bench row's ``base_commit``), then as released (its ``environment_setup_commit``, and the SWE-smith
row's snapshot, whose ``patch`` is the bug). The recipe comes from $SWEBOX_SWE_SPECS with swebox's junit
grader (toolz is a pytest suite).
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

pytestmark = pytest.mark.e2e

SWEBOX = [sys.executable, "-m", "swebox.scripts.cli"]
F2P = ["toolz/tests/test_itertoolz.py::test_frequencies"]
P2P = ["toolz/tests/test_itertoolz.py::test_remove", "toolz/tests/test_itertoolz.py::test_groupby"]


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)


def test_rows_in_dataset_formats_build_from_a_mirror_and_validate(tmp_path):
    if shutil.which("mksquashfs") is None:
        pytest.skip("the layer store here packs squashfs")
    download = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "toolz",
                               "toolz==1.0.0", "-d", str(tmp_path / "sdist")], capture_output=True, text=True)
    assert download.returncode == 0, download.stderr
    with tarfile.open(next((tmp_path / "sdist").glob("toolz-1.0.0.tar.gz"))) as tar:
        tar.extractall(tmp_path, filter="data")
    work = tmp_path / "toolz-1.0.0"
    source = work / "toolz" / "itertoolz.py"
    fixed = source.read_text()
    assert fixed.count("d[item] += 1") == 1
    source.write_text(fixed.replace("d[item] += 1", "d[item] += 2"))
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "frequencies counts twice")
    base = _git(work, "rev-parse", "HEAD").strip()
    source.write_text(fixed)
    _git(work, "commit", "-qam", "frequencies counts once")
    setup = _git(work, "rev-parse", "HEAD").strip()
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "pytoolz__toolz.git")], check=True)

    fix = _git(work, "diff", base, setup)
    swebench = {"repo": "pytoolz/toolz", "instance_id": "pytoolz__toolz-1", "base_commit": base, "patch": fix,
                "test_patch": "", "problem_statement": "frequencies counts every item twice", "hints_text": "",
                "created_at": "2024-08-01T00:00:00Z", "version": "1.0", "FAIL_TO_PASS": json.dumps(F2P),
                "PASS_TO_PASS": json.dumps(P2P), "environment_setup_commit": setup}
    swesmith = {"instance_id": f"pytoolz__toolz.{setup[:8]}.func_pm_op_change_const__x1",
                "patch": _git(work, "diff", setup, base), "FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P,
                "image_name": f"swebench/swesmith.x86_64.pytoolz_1776_toolz.{setup[:8]}",
                "repo": f"swesmith/pytoolz__toolz.{setup[:8]}", "problem_statement": "frequencies is off"}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(swebench) + "\n" + json.dumps(swesmith) + "\n")
    recipe = {"python": "3.11", "pip_packages": ["pytest==8.4.2"], "install": "python -m pip install -e .",
              "test_cmd": "pytest -rA", "grader": "junit"}
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps({"pytoolz/toolz": {"1.0": recipe, setup[:8]: recipe}}))
    env = {**os.environ, "SWEBOX_SWE_SPECS": str(specs), "SWEBOX_GIT_MIRROR": str(mirror),
           "SWEBOX_LAYER_CACHE": str(tmp_path / "node"), "SWEBOX_LAYER_STORE": str(tmp_path / "store")}

    built = _run([*SWEBOX, "cache", "build", "--tasks", str(rows), "--jobs", "2"], env)  # mirror from the env
    assert built.returncode == 0, built.stdout + built.stderr
    assert "2 envs: 2 built, 0 reused, 0 failed" in built.stdout
    assert "2 task layers (starting trees): 2 built, 0 reused, 0 failed" in built.stdout
    again = _run([*SWEBOX, "cache", "build", "--tasks", str(rows)], env)
    assert "2 envs: 0 built, 2 reused" in again.stdout and "2 task layers (starting trees): 0 built, 2 reused" \
        in again.stdout
    checked = _run([*SWEBOX, "tasks", "validate", str(rows), "--jobs", "2", "--timeout", "300"], env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().splitlines()[-1] == "2 passed, 0 failed"
