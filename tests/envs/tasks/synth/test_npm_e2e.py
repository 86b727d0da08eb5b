"""JavaScript end to end: a real npm package (minimist 1.2.8, its tape suite) synthesised, graded and loaded.

`swebox tasks synth --project npm:minimist@1.2.8` downloads the tarball, builds the env (npm install of its
devDependencies), finds sites with acorn and keeps bugs whose `node --test` TAP log, read by SWE-bench's TAP
parser, fails some test files and passes the rest. Then `swebox tasks validate` grades every task (gold
resolves, the empty diff does not), wrong diffs score 0, and a row in SWE-bench Multilingual's format built
from the same repository (GitHub played by a local git mirror) goes through `swebox cache build` and
`swebox tasks validate`. The download and the parser are cached under the suite's cache
($SWEBOX_TEST_NPM_CACHE, default /var/tmp/swebox-test-npm); the test skips only when the registry is unreachable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from swebox.envs.cache import LayerStore, copy_layers
from swebox.envs.cache.toolchains import build_toolchain
from swebox.envs.tasks import load
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.synth import npm
from swebox.envs.tasks.synth.env import LAYERS_DIR
from swebox.envs.tasks.validate import StoreLayers

from tests.debian_tools import toolchain_store

pytestmark = pytest.mark.e2e
SPEC = "npm:minimist@1.2.8"
SWEBOX = [sys.executable, "-m", "swebox.scripts.cli"]


def _cli(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*SWEBOX, *args], capture_output=True, text=True, env=env, timeout=900)


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    if shutil.which("mksquashfs") is None or shutil.which("node") is None:
        pytest.skip("needs mksquashfs (the layer store packs squashfs) and node on PATH")
    try:
        urllib.request.urlopen(f"{npm.REGISTRY}/minimist/1.2.8", timeout=20).close()
    except OSError as exc:
        pytest.skip(f"the npm registry {npm.REGISTRY} is unreachable ({exc}): the package cannot be downloaded")
    root = tmp_path_factory.mktemp("npm")
    cache = os.environ.get("SWEBOX_TEST_NPM_CACHE") or "/var/tmp/swebox-test-npm"
    env = {**os.environ, "SWEBOX_NPM_CACHE": cache, "SWEBOX_LAYER_CACHE": str(root / "node")}
    out = root / "out"
    # the node toolchain layer comes from the suite's shared toolchain store (built there once, by this test or
    # test_toolchains.py) into the store synthesis builds in; with a key it lacks, synthesis builds it as before
    shared = LayerStore(toolchain_store())
    copy_layers(shared, LayerStore(out / LAYERS_DIR), [build_toolchain(shared, "node").key])
    made = _cli(
        [
            "tasks",
            "synth",
            "--project",
            SPEC,
            "--out",
            str(out),
            "--max-tasks",
            "2",
            "--jobs",
            "2",
            "--max-candidates",
            "40",
        ],
        env,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    mp = pytest.MonkeyPatch()
    mp.setenv("SWEBOX_LAYER_CACHE", str(root / "node"))
    layers = StoreLayers(out / "layers")
    yield {
        "root": root,
        "out": out,
        "env": env,
        "layers": layers,
        "cache": Path(cache),
        "tasks": [Task.from_json(line) for line in (out / "tasks.jsonl").read_text().splitlines()],
    }
    layers.close()
    mp.undo()


def test_synthesised_rows_are_log_graded_javascript_tasks(synth):
    tasks = synth["tasks"]
    assert len(tasks) == 2
    for task in tasks:
        assert (task.language, task.grader, task.log_parser) == ("javascript", "log", "tap")
        assert task.test_cmd == "node --test --test-reporter=tap test" and task.repo == "minimist"
        assert task.version == "1.2.8"
        assert task.instance_id.startswith("minimist-1.2.8.")
        # ids are what SWE-bench's TAP parser reads from node's runner: one per test file
        assert all(npm.test_file(t) in task.test_files for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))
        assert "test/unknown.js" in task.test_files and not any("node_modules" in f for f in task.test_files)
        assert task.patch.startswith("diff --git a/") and "test/" not in task.patch.split("\n", 1)[0]


def test_tests_run_on_the_node_toolchain_layer(synth):
    """The env was built on the node toolchain layer (Debian's node 18, not the host's node), and the task's
    layers (what validate, the grader and episodes stack) run that node: its path is below /opt/toolchains."""
    from swebox.envs.cache import LayerStore
    from swebox.envs.cache.toolchain_specs import PREFIX_ROOT
    from swebox.envs.cache.toolchains import toolchain_env
    from swebox.envs.sandbox import Sandbox, SandboxPolicy
    from swebox.envs.sandbox.policy import DEFAULT_ENV

    task = synth["tasks"][0]
    assert task.env.toolchains == npm.NODE_TOOLCHAINS == ("node",)
    manifest = LayerStore(synth["out"] / "layers").get(task.env_key)
    assert list(manifest.meta["toolchains"]) == ["node"]
    policy = SandboxPolicy(network="none", env={**DEFAULT_ENV, **toolchain_env(task.env.toolchains)})
    with Sandbox(synth["layers"](task), policy) as sb:
        ran = sb.exec("node -p process.execPath && node --version", timeout=120)
        tap = sb.exec("cd /testbed && node --test --test-reporter=tap test/short.js", timeout=300)
    assert ran.exit_code == 0, ran.output
    path, version = ran.output.split("\n")[:2]
    assert path.startswith(f"{PREFIX_ROOT}/node/") and version.startswith("v18."), ran.output
    # node 18's runner speaks TAP (passing or failing: the file may be one the bug breaks), as the parser reads
    assert re.search(r"^(not )?ok 1 - /testbed/test/short\.js$", tap.output, re.M), tap.output
    # synthesis's own sandboxes (where mutants are tested) stack the same layer, with its environment
    from swebox.envs.tasks.synth.env import CacheEnvironments
    from swebox.envs.tasks.synth.recipe import project_from_npm

    envs = CacheEnvironments(synth["out"])
    try:
        env = envs(project_from_npm(SPEC, synth["cache"]))
        assert list(env.toolchains) == ["node"]
        sb = env.sandbox()
        try:
            ran = sb.exec("node -p process.execPath", timeout=120)
        finally:
            sb.close()
        assert ran.exit_code == 0 and ran.output.startswith(f"{PREFIX_ROOT}/node/"), ran.output
    finally:
        envs.close()


def test_validate_resolves_gold_and_not_empty(synth):
    checked = _cli(
        [
            "tasks",
            "validate",
            str(synth["out"] / "tasks.jsonl"),
            "--layers",
            str(synth["out"] / "layers"),
            "--timeout",
            "300",
        ],
        synth["env"],
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().splitlines()[-1] == "2 passed, 0 failed"


def test_wrong_diffs_score_zero(synth):
    task = synth["tasks"][0]
    paths = synth["layers"](task)
    # a diff elsewhere in the module: the bug stays
    path = task.metadata["synth"]["path"]
    noise = (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,2 @@\n"
        f"+// unrelated\n {_first_line(synth, task, path)}\n"
    )
    wrong = grade(task, noise, layers=paths)
    assert wrong.applied and not wrong.resolved and wrong.reward == 0.0
    # rewriting a failing test file to pass: the grader restores the test files, so the bug still shows
    failing = npm.test_file(task.FAIL_TO_PASS[0])
    cheat = grade(task, _replace_file(synth, task, failing, "process.exit(0);\n"), layers=paths)
    assert not cheat.resolved and cheat.reward == 0.0
    gold = grade(task, task.patch, layers=paths)
    assert gold.resolved and gold.log_status == "ok"


def _first_line(synth, task, path: str) -> str:
    return _buggy_text(synth, task, path).split("\n", 1)[0]


def _buggy_text(synth, task, path: str) -> str:
    from swebox.envs.sandbox import Sandbox

    with Sandbox(synth["layers"](task)) as sb:
        return sb.read_file(f"/testbed/{path}").decode()


def _replace_file(synth, task, path: str, text: str) -> str:
    old = _buggy_text(synth, task, path).split("\n")
    lines = old[:-1] if old[-1] == "" else old
    body = "".join(f"-{line}\n" for line in lines) + f"+{text}"
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{len(lines)} +1,1 @@\n{body}"


def _multilingual(synth, name: str, work: Path, recipe: dict, row: dict) -> Task:
    """Mirror ``work`` as GitHub's minimistjs/minimist, give ``recipe`` through $SWEBOX_SWE_SPECS, then `swebox
    cache build` and `swebox tasks validate` the row (gold resolves, empty does not); returns the loaded task.
    The row's env is built into the synthesis's store (its own key: another source and commit), where the node
    toolchain layer already is: a store of its own would download and build that layer again."""
    root = synth["root"] / name
    store = synth["out"] / "layers"
    mirror = root / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "minimistjs__minimist.git")], check=True)
    row = {
        "repo": "minimistjs/minimist",
        "instance_id": f"minimistjs__minimist-{name}",
        "test_patch": "",
        "hints_text": "",
        "created_at": "2024-08-01T00:00:00Z",
        "version": "1.2",
        **row,
    }
    rows = root / "multilingual.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    specs = root / "specs.json"
    specs.write_text(json.dumps({"minimistjs/minimist": {"1.2": recipe}}))
    env = {
        **synth["env"],
        "SWEBOX_SWE_SPECS": str(specs),
        "SWEBOX_GIT_MIRROR": str(mirror),
        "SWEBOX_LAYER_STORE": str(store),
    }
    built = _cli(["cache", "build", "--tasks", str(rows)], env)
    assert built.returncode == 0, built.stdout + built.stderr
    checked = _cli(["tasks", "validate", str(rows), "--timeout", "300"], env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().splitlines()[-1] == "1 passed, 0 failed"
    mp = pytest.MonkeyPatch()
    mp.setenv("SWEBOX_SWE_SPECS", str(specs))
    try:
        (loaded,) = load(rows)
        assert (loaded.language, loaded.grader) == ("javascript", "log") and loaded.env.commit == row[
            "environment_setup_commit"
        ]
        assert loaded.env.toolchains == ("node",)  # built and graded on the node layer, as synthesis's tasks
        layers = StoreLayers(store)
        try:  # a diff elsewhere: the bug stays
            wrong = (
                "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n"
                f"+noise\n {(work / 'README.md').read_text().split(chr(10), 1)[0]}\n"
            )
            assert not grade(loaded, wrong, layers=layers(loaded)).resolved
        finally:
            layers.close()
    finally:
        mp.undo()
    return loaded


def _history(synth, name: str) -> tuple[Path, str]:
    work = synth["root"] / name / "work"
    subprocess.run(["git", "clone", "-q", str(synth["cache"] / "minimist-1.2.8"), str(work)], check=True)
    return work, _git(work, "rev-parse", "HEAD").strip()


def test_multilingual_row_from_the_same_repository_validates(synth):
    """A SWE-bench Multilingual row (SWE-bench's keys only) over minimist's history in a local mirror: the env
    at the clean commit, the start at the synthesised bug; node --test read by the TAP parser."""
    task = synth["tasks"][0]
    work, _ = _history(synth, "tap")
    # the env commit keeps tape, the one devDependency the tests require: the synthesised env above already
    # installed all nine (eslint, nyc, ... hundreds of packages from the registry) with the same npm command;
    # here it would only download them again (into the row's own env layer) for a suite that never loads them
    package = json.loads((work / "package.json").read_text())
    package["devDependencies"] = {"tape": package["devDependencies"]["tape"]}
    (work / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    _git(work, "commit", "-qam", "devDependencies: tape only")
    setup = _git(work, "rev-parse", "HEAD").strip()
    subprocess.run(["git", "-C", str(work), "apply", "-R"], input=task.patch, text=True, check=True)
    _git(work, "commit", "-qam", "a bug")
    recipe = {
        "language": "javascript",
        "log_parser": "tap",
        "install": [npm.INSTALL],
        "test_cmd": ["node --test --test-reporter=tap test"],
        "docker_specs": {"node_version": "20"},
    }
    row = {
        "base_commit": _git(work, "rev-parse", "HEAD").strip(),
        "environment_setup_commit": setup,
        "patch": task.patch,
        "problem_statement": task.problem_statement,
        "FAIL_TO_PASS": json.dumps(list(task.FAIL_TO_PASS)),
        "PASS_TO_PASS": json.dumps(list(task.PASS_TO_PASS)),
    }
    loaded = _multilingual(synth, "tap", work, recipe, row)
    assert loaded.log_parser == "tap" and loaded.metadata["node_version"] == "20"


JEST_TESTS = """const parse = require('../index.js');
describe('minimist', () => {
  test('parses a number', () => { expect(parse(['--n', '5']).n).toBe(5); });
  test('parses a long flag', () => { expect(parse(['--a', 'b']).a).toBe('b'); });
  test('parses a short flag', () => { expect(parse(['-x']).x).toBe(true); });
});
"""


def test_multilingual_row_graded_by_swebench_jest_parser(synth):
    """The same repository with a jest suite (jest 29.7.0 from npm, its --verbose log read by SWE-bench's
    parse_log_jest: the parser of babel and docusaurus rows): a hand-made bug in isNumber fails one test."""
    work, _ = _history(synth, "jest")
    package = json.loads((work / "package.json").read_text())
    package["devDependencies"] = {"jest": "29.7.0"}  # the tape suite is not run here: jest's only
    (work / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    (work / "__tests__").mkdir()
    (work / "__tests__" / "parse.test.js").write_text(JEST_TESTS)
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "a jest suite")
    setup = _git(work, "rev-parse", "HEAD").strip()
    source = (work / "index.js").read_text()
    check = "return (/^[-+]?(?:\\d+(?:\\.\\d*)?|\\.\\d+)(e[-+]?\\d+)?$/).test(x);"
    assert source.count(check) == 1
    (work / "index.js").write_text(source.replace(check, "return false;"))
    _git(work, "commit", "-qam", "isNumber: only numbers and hex")
    base = _git(work, "rev-parse", "HEAD").strip()
    patch = _git(work, "diff", base, setup, "--", "index.js")
    recipe = {
        "language": "javascript",
        "log_parser": "jest",
        "install": [npm.INSTALL],
        "test_cmd": "./node_modules/.bin/jest --verbose --no-color",
    }
    row = {
        "base_commit": base,
        "environment_setup_commit": setup,
        "patch": patch,
        "problem_statement": "numbers",
        "FAIL_TO_PASS": ["parses a number"],
        "PASS_TO_PASS": ["parses a long flag", "parses a short flag"],
    }
    assert _multilingual(synth, "jest", work, recipe, row).log_parser == "jest"
