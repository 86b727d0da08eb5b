"""Starting states of dataset rows, end to end: the agent starts from the row's buggy tree, never the fixed one.

A real project with real history plays GitHub through a local git mirror: toolz 1.0.0's sdist from PyPI,
committed first with a bug in ``frequencies`` (the SWE-bench row's ``base_commit``), then as released plus a
later file (its ``environment_setup_commit``, and the SWE-smith row's snapshot, whose ``patch`` is the bug).
So the commit each environment is built at already contains the fix. Rows in the datasets' exact formats go
through `swebox cache build` (mirror from $SWEBOX_GIT_MIRROR) and `swebox tasks validate`; the empty diff
must NOT resolve and the gold patch must. Before this, both rows started from the fixed tree and an empty
diff was resolved (the control below grades that old start).

The recipes come from a $SWEBOX_SWE_SPECS file (swebench does not know this repository) asking for swebox's
junit grader (toolz is a pytest suite).
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
from swebox.envs.episodes.episode_state import prepare_start
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks import load
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.validate import StoreLayers

pytestmark = pytest.mark.e2e

SWEBOX = [sys.executable, "-m", "swebox.scripts.cli"]
SOURCE = "toolz/itertoolz.py"
F2P = ["toolz/tests/test_itertoolz.py::test_frequencies"]
P2P = ["toolz/tests/test_itertoolz.py::test_remove", "toolz/tests/test_itertoolz.py::test_groupby"]
LATER = "toolz/_later.py"


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _r2e_commit(old: str, new: str, diff: str) -> dict:
    """A one-file git diff in R2E-Gym's ``parsed_commit_content`` form (structured hunks)."""
    path = diff.split(" b/", 1)[1].split("\n", 1)[0]
    hunks = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            ranges, _, section = line[3:].partition(" @@")
            (a, b), (c, d) = (r[1:].split(",") for r in ranges.split())
            hunks.append(
                {
                    "descriptor": {
                        "old_range": {"start": int(a), "length": int(b)},
                        "new_range": {"start": int(c), "length": int(d)},
                        "section": section.strip(),
                    },
                    "line_group": {"all_lines": []},
                }
            )
        elif hunks and line[:1] in (" ", "+", "-"):
            kind = {" ": "context", "+": "added", "-": "deleted"}[line[0]]
            hunks[-1]["line_group"]["all_lines"].append({"type": kind, "content": line[1:]})
    file_diff = {
        "header": {"file": {"path": path}},
        "minus_file": {"path": f"a/{path}"},
        "plus_file": {"path": f"b/{path}"},
        "hunks": hunks,
    }
    return {"old_commit_hash": old, "new_commit_hash": new, "file_diffs": [file_diff]}


R2E_TESTS = (
    "from toolz import frequencies\n\n\ndef test_counts_once():\n"
    "    assert frequencies('aba') == {'a': 2, 'b': 1}\n\n\ndef test_empty():\n"
    "    assert frequencies('') == {}\n"
)


def _cli(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*SWEBOX, *args], capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if shutil.which("mksquashfs") is None:
        pytest.skip("the layer store here packs squashfs")
    root = tmp_path_factory.mktemp("start")
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            "toolz",
            "toolz==1.0.0",
            "-d",
            str(root / "sdist"),
        ],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stderr
    with tarfile.open(root / "sdist" / "toolz-1.0.0.tar.gz") as tar:
        tar.extractall(root, filter="data")
    work = root / "toolz-1.0.0"
    fixed = (work / SOURCE).read_text()
    assert fixed.count("d[item] += 1") == 1
    (work / SOURCE).write_text(fixed.replace("d[item] += 1", "d[item] += 2"))
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "frequencies counts twice")
    base = _git(work, "rev-parse", "HEAD").strip()
    (work / SOURCE).write_text(fixed)
    (work / LATER).write_text("LATER = 'from a later commit'\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "frequencies counts once; later work")
    setup = _git(work, "rev-parse", "HEAD").strip()
    mirror = root / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "pytoolz__toolz.git")], check=True)

    swebench = {
        "repo": "pytoolz/toolz",
        "instance_id": "pytoolz__toolz-1",
        "base_commit": base,
        "patch": _git(work, "diff", base, setup, "--", SOURCE),
        "test_patch": "",
        "problem_statement": "frequencies counts every item twice",
        "hints_text": "",
        "created_at": "2024-08-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "environment_setup_commit": setup,
    }
    swesmith = {
        "instance_id": f"pytoolz__toolz.{setup[:8]}.func_pm_op_change_const__x1",
        "patch": _git(work, "diff", setup, base, "--", SOURCE),
        "FAIL_TO_PASS": F2P,
        "PASS_TO_PASS": P2P,
        "image_name": f"swebench/swesmith.x86_64.pytoolz_1776_toolz.{setup[:8]}",
        "repo": f"swesmith/pytoolz__toolz.{setup[:8]}",
        "problem_statement": "frequencies is off",
    }
    # R2E-Gym's columns: the env and the start are the old commit, the fix and the hidden tests come as JSON
    r2e = {
        "repo_name": "pytoolz/toolz",
        "docker_image": f"namanjain12/toolz_final:{setup}",
        "commit_hash": setup,
        "parsed_commit_content": json.dumps(_r2e_commit(base, setup, _git(work, "diff", base, setup, "--", SOURCE))),
        "execution_result_content": json.dumps(
            {"test_file_codes": [R2E_TESTS], "test_file_names": ["test_frequencies.py"]}
        ),
        "modified_files": [SOURCE],
        "problem_statement": "frequencies counts twice",
        "prompt": "",
        "expected_output_json": json.dumps({"test_counts_once": "PASSED", "test_empty": "PASSED"}),
    }
    rows = root / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in (swebench, swesmith, r2e)))
    recipe = {
        "python": "3.11",
        "pip_packages": ["pytest==8.4.2"],
        "install": "python -m pip install -e .",
        "test_cmd": "pytest -rA",
        "grader": "junit",
    }
    specs = root / "specs.json"
    specs.write_text(json.dumps({"pytoolz/toolz": {"1.0": recipe, setup[:8]: recipe, "r2e": recipe}}))
    store = root / "store"
    env = {
        **os.environ,
        "SWEBOX_SWE_SPECS": str(specs),
        "SWEBOX_GIT_MIRROR": str(mirror),
        "SWEBOX_LAYER_CACHE": str(root / "node"),
        "SWEBOX_LAYER_STORE": str(store),
    }
    built = _cli(["cache", "build", "--tasks", str(rows), "--jobs", "2"], env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "3 envs: 3 built, 0 reused, 0 failed" in built.stdout  # R2E-Gym's env is its start: no task layer
    assert "2 task layers (starting trees): 2 built, 0 reused, 0 failed" in built.stdout
    mp = pytest.MonkeyPatch()
    mp.setenv("SWEBOX_SWE_SPECS", str(specs))
    mp.setenv("SWEBOX_LAYER_CACHE", str(root / "node"))
    layers = StoreLayers(store)
    yield {
        "tasks": load(rows),
        "layers": layers,
        "base": base,
        "setup": setup,
        "rows": rows,
        "store": store,
        "mirror": mirror,
        "work": work,
        "env": env,
        "fixed": fixed,
    }
    layers.close()
    mp.undo()


def test_cache_build_reuses_and_validate_passes_every_row(world):
    again = _cli(["cache", "build", "--tasks", str(world["rows"])], world["env"])
    assert "3 envs: 0 built, 3 reused" in again.stdout, again.stdout + again.stderr
    assert "2 task layers (starting trees): 0 built, 2 reused" in again.stdout
    checked = _cli(["tasks", "validate", str(world["rows"]), "--jobs", "2", "--timeout", "300"], world["env"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().splitlines()[-1] == "3 passed, 0 failed"  # gold resolves, empty does not


def test_swebench_row_starts_at_base_commit_without_later_history(world):
    task = world["tasks"][0]
    assert task.env.commit == world["setup"] and task.metadata["checkout"]["commit"] == world["base"]
    assert task.grader == "junit" and task.test_cmd == "/venv/bin/python -m pytest -rA"
    paths = world["layers"](task)
    try:
        with Sandbox(paths) as sb:
            assert "d[item] += 2" in sb.exec(f"cat /testbed/{SOURCE}").output
            assert sb.exec(f"test -e /testbed/{LATER} || echo absent").output.strip() == "absent"
            log = sb.exec("cd /testbed && git log --all --format=%P/%s").output.strip().splitlines()
            assert len(log) == 1 and log[0].startswith("/")  # one root commit, nothing after base
            fixed_blob = _git(world["work"], "rev-parse", f"{world['setup']}:{SOURCE}").strip()
            assert sb.exec(f"cd /testbed && git cat-file -e {fixed_blob}").exit_code != 0  # the fix is not there
            assert sb.exec("cd /testbed && git status --porcelain").output.strip() == ""
            # installed at base_commit by the recipe's install command (editable: it imports /testbed's code)
            where = sb.exec("cd / && /venv/bin/python -c 'import toolz; print(toolz.__file__)'").output.strip()
            assert where == "/testbed/toolz/__init__.py"
        empty = grade(task, "", layers=paths, timeout=120)
        gold = grade(task, task.patch, layers=paths, timeout=120)
    finally:
        world["layers"].release(task)
    assert not empty.resolved and empty.tests[F2P[0]].status == "failed", empty
    assert gold.resolved, gold


def test_swesmith_row_starts_with_the_bug_and_without_its_f2p_test_files(world):
    task = world["tasks"][1]
    assert task.bug_patch and task.hidden_tests and task.test_files == ("toolz/tests/test_itertoolz.py",)
    paths = world["layers"](task)
    try:
        with Sandbox(paths) as sb:
            assert "d[item] += 2" in sb.exec(f"cat /testbed/{SOURCE}").output
            prepare_start(sb, task)  # what every episode's start state does
            assert sb.exec("test -e /testbed/toolz/tests/test_itertoolz.py || echo hidden").output.strip() == "hidden"
        empty = grade(task, "", layers=paths, timeout=120)
        gold = grade(task, task.patch, layers=paths, timeout=120)
        # the control: the env layer alone is the fixed snapshot, where the old loader started the task
        assert grade(task, "", layers=paths[:1], timeout=120).resolved
    finally:
        world["layers"].release(task)
    assert not empty.resolved and empty.tests[F2P[0]].status == "failed", empty
    assert gold.resolved and gold.tests[P2P[0]].status == "passed", gold


def test_a_row_whose_base_is_its_setup_commit_gets_a_layer_with_the_install_only(world):
    # 8 Verified rows have base_commit == environment_setup_commit: no file moves, the install still runs there
    from swebox.envs.cache import LayerStore
    from swebox.envs.cache.checkout import CheckoutSpec, build_checkout_layer

    task = world["tasks"][0]
    spec = CheckoutSpec(task.env, world["setup"], "", tuple(task.metadata["checkout"]["commands"]))
    store = LayerStore(world["store"])
    manifest = build_checkout_layer(store, spec, mirror=str(world["mirror"]), cache=world["layers"].cache)
    assert manifest.meta["changed"] == 0
    with world["layers"].cache.acquire(task.env_key) as env, world["layers"].cache.acquire(manifest.key) as start:
        with Sandbox([env.path]) as sb:
            env_commit = sb.exec("cd /testbed && git rev-parse HEAD").output.strip()
        with Sandbox([env.path, start.path]) as sb:
            assert sb.exec(f"cat /testbed/{SOURCE}").output == world["fixed"]
            assert (
                sb.exec("cd /testbed && git status --porcelain && git log --all --format=%s").output.strip()
                == f"swebox task start {world['setup']}"
            )
            assert sb.exec(f"cd /testbed && git cat-file -e {env_commit}").exit_code != 0
            where = sb.exec("cd / && /venv/bin/python -c 'import toolz; print(toolz.__file__)'").output.strip()
            assert where == "/testbed/toolz/__init__.py"


def test_r2e_gym_row_starts_at_its_old_commit_without_its_hidden_tests(world):
    task = world["tasks"][2]
    assert task.repo == "pytoolz/toolz" and task.env.commit == world["base"] and not task.task_layer_key
    assert task.hidden_tests and task.test_files == ("r2e_tests/test_frequencies.py",)
    assert task.expected_status == {"test_counts_once": "PASSED", "test_empty": "PASSED"}
    paths = world["layers"](task)
    try:
        with Sandbox(paths) as sb:
            assert "d[item] += 2" in sb.exec(f"cat /testbed/{SOURCE}").output  # the old (buggy) commit
            assert sb.exec("test -e /testbed/r2e_tests || echo absent").output.strip() == "absent"
        empty = grade(task, "", layers=paths, timeout=120)
        gold = grade(task, task.patch, layers=paths, timeout=120)
    finally:
        world["layers"].release(task)
    # R2E-Gym's reward: every expected status must hold
    assert not empty.resolved and any("test_counts_once should be PASSED" in e for e in empty.errors), empty
    assert gold.resolved and gold.errors == [], gold
