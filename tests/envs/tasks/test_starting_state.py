"""Starting states of dataset rows: the agent starts from the row's buggy tree, never from the fixed one.

A real local repository plays GitHub through a git mirror: its later commit (the SWE-bench row's
``environment_setup_commit``, the SWE-smith row's snapshot) already contains the fix. Rows in the datasets'
own formats go through `swebox cache build --git-mirror`; the empty diff must NOT resolve and the gold patch
must. Before this, both rows started from the fixed tree and an empty diff was resolved.

The rows' recipes come from a $SWEBOX_SWE_SPECS file (the repository is not one swebench knows), which
asks for swebox's junit grader (``"grader": "junit"``) for this pytest suite.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from swebox.envs.episode_state import prepare_start
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks import load
from swebox.envs.tasks.grading import grade
from swebox.envs.tasks.validate import StoreLayers

pytestmark = pytest.mark.e2e

PYPROJECT = ('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
             '[project]\nname = "calc"\nversion = "0.1"\n')
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TEST_MUL = "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
TEST_BOTH = TEST_MUL + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
F2P, P2P = ["tests/test_calc.py::test_add"], ["tests/test_calc.py::test_mul"]


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if shutil.which("mksquashfs") is None:
        pytest.skip("the layer store here packs squashfs")
    root = tmp_path_factory.mktemp("start")
    work = root / "calc"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    base = _commit(work, {"pyproject.toml": PYPROJECT, "src/calc/__init__.py": BUGGY, "tests/test_calc.py": TEST_MUL},
                   "buggy")
    setup = _commit(work, {"src/calc/__init__.py": FIXED, "tests/test_calc.py": TEST_BOTH,
                           "src/calc/later.py": "LATER = 'from a later commit'\n"}, "fix add, and later work")
    mirror = root / "mirror"
    mirror.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "local__calc.git")], check=True)
    fix = _git(work, "diff", base, setup, "--", "src/calc/__init__.py")
    test_patch = _git(work, "diff", base, setup, "--", "tests")
    swebench = {"instance_id": "local__calc-1", "repo": "local/calc", "base_commit": base, "patch": fix,
                "test_patch": test_patch, "problem_statement": "add subtracts", "hints_text": "",
                "created_at": "2024-01-01T00:00:00Z", "version": "0.1", "environment_setup_commit": setup,
                "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": json.dumps(P2P)}
    swesmith = {"instance_id": f"local__calc.{setup[:8]}.func_pm_op_swap__1",
                "repo": f"swesmith/local__calc.{setup[:8]}",
                "patch": _git(work, "diff", setup, base, "--", "src/calc/__init__.py"), "FAIL_TO_PASS": F2P,
                "PASS_TO_PASS": P2P, "image_name": f"swesmith.x86_64.local__calc.{setup[:8]}",
                "problem_statement": "add subtracts"}
    specs = root / "specs.json"
    recipe = {"python": "3.11", "pip_packages": ["pytest==8.4.2"], "install": "python -m pip install -e .",
              "test_cmd": "pytest -rA", "grader": "junit"}
    specs.write_text(json.dumps({"local/calc": {"0.1": recipe, setup[:8]: recipe}}))
    rows = root / "rows.jsonl"
    rows.write_text(json.dumps(swebench) + "\n" + json.dumps(swesmith) + "\n")
    store = root / "store"
    mp = pytest.MonkeyPatch()
    mp.setenv("SWEBOX_SWE_SPECS", str(specs))
    mp.setenv("SWEBOX_LAYER_CACHE", str(root / "node"))
    from swebox.scripts.cli import main

    assert main(["cache", "--store", str(store), "build", "--tasks", str(rows), "--git-mirror", str(mirror),
                 "--jobs", "2"]) == 0
    tasks = load(rows)
    layers = StoreLayers(store)
    yield {"tasks": tasks, "layers": layers, "base": base, "setup": setup, "rows": rows, "store": store,
           "mirror": mirror, "work": work}
    layers.close()
    mp.undo()


def test_swebench_row_starts_at_base_commit_without_later_history(world):
    task = world["tasks"][0]
    assert task.env.commit == world["setup"] and task.metadata["checkout"]["commit"] == world["base"]
    assert task.grader == "junit" and task.test_cmd == "/venv/bin/python -m pytest -rA"
    paths = world["layers"](task)
    try:
        with Sandbox(paths) as sb:
            assert sb.exec("cat /testbed/src/calc/__init__.py").output == BUGGY
            assert sb.exec("test -e /testbed/src/calc/later.py || echo absent").output.strip() == "absent"
            log = sb.exec("cd /testbed && git log --all --format=%P/%s").output.strip().splitlines()
            assert len(log) == 1 and log[0].startswith("/")  # one root commit, nothing after base
            fixed_blob = _git(world["work"], "rev-parse", f"{world['setup']}:src/calc/__init__.py").strip()
            assert sb.exec(f"cd /testbed && git cat-file -e {fixed_blob}").exit_code != 0  # the fix is not there
            assert sb.exec("cd /testbed && git status --porcelain").output.strip() == ""
            # installed at base_commit by the recipe's install command (editable: it imports /testbed's code)
            where = sb.exec("cd / && /venv/bin/python -c 'import calc; print(calc.__file__)'").output.strip()
            assert where == "/testbed/src/calc/__init__.py"
        empty = grade(task, "", layers=paths, timeout=120)
        gold = grade(task, task.patch, layers=paths, timeout=120)
    finally:
        world["layers"].release(task)
    assert not empty.resolved and empty.tests[F2P[0]].status == "failed", empty
    assert gold.resolved, gold


def test_swesmith_row_starts_with_the_bug_and_without_its_f2p_test_files(world):
    task = world["tasks"][1]
    assert task.bug_patch and task.hidden_tests and task.test_files == ("tests/test_calc.py",)
    paths = world["layers"](task)
    try:
        with Sandbox(paths) as sb:
            assert sb.exec("cat /testbed/src/calc/__init__.py").output == BUGGY
            prepare_start(sb, task)  # what every episode's start state does
            assert sb.exec("test -e /testbed/tests/test_calc.py || echo hidden").output.strip() == "hidden"
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
            assert sb.exec("cat /testbed/src/calc/__init__.py").output == FIXED
            assert sb.exec("cd /testbed && git status --porcelain && git log --all --format=%s").output.strip() \
                == f"swebox task start {world['setup']}"
            assert sb.exec(f"cd /testbed && git cat-file -e {env_commit}").exit_code != 0
            where = sb.exec("cd / && /venv/bin/python -c 'import calc; print(calc.__file__)'").output.strip()
            assert where == "/testbed/src/calc/__init__.py"
