"""Synthesis against a small fixture project in real sandboxes: validated tasks, resume, pure helpers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.synth.journal import Journal
from swebox.envs.tasks.synth.mutations import Mutation, mutations
from swebox.envs.tasks.synth.pipeline import (
    SynthConfig,
    fix_diff,
    interleave,
    stable_tests,
    synthesize,
)
from swebox.envs.tasks.synth.recipe import ProjectRecipe
from swebox.envs.tasks.synth.runner import RunResult

HOST_SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")

CALC = """\
def add(a, b):
    return a + b


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)
"""

TESTS = """\
from calc.core import add, clamp, mean


def test_add():
    assert add(2, 3) == 5


def test_add_strings():
    assert add("a", "b") == "ab"


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_mean():
    assert mean([1, 2, 3, 6]) == 3
"""


def test_fix_diff_applies_with_git(tmp_path):
    buggy = "def f(a):\n    return a - 1\n"
    fixed = "def f(a):\n    return a + 1"  # no newline at the end: git's marker must be written
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(buggy)
    (tmp_path / "fix.diff").write_text(fix_diff("pkg/m.py", buggy, fixed))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "fix.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "pkg" / "m.py").read_text() == fixed


@pytest.mark.parametrize("sep", ["\f", "\x1c", "\u2028"])
def test_fix_diff_keeps_a_line_with_a_form_feed_whole(tmp_path, sep):
    # str.splitlines broke such a line in two: the gold patch said the file lacked a final newline there
    buggy = f"x = 1{sep}# page\ndef f(a):\n    return a - 1\n"
    fixed = buggy.replace("a - 1", "a + 1")
    (tmp_path / "m.py").write_text(buggy, newline="")
    (tmp_path / "fix.diff").write_text(fix_diff("m.py", buggy, fixed), newline="")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "fix.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "m.py").read_bytes().decode() == fixed


def test_stable_tests_keeps_only_always_passing():
    runs = [
        RunResult({"t::a": "passed", "t::b": "passed", "t::c": "failed"}),
        RunResult({"t::a": "passed", "t::b": "failed", "t::c": "failed"}),
        RunResult({"t::a": "xfailed", "t::b": "passed"}),
    ]
    assert stable_tests(runs) == {"t::a"}


def test_interleave_alternates_techniques_deterministically():
    items = mutations(CALC, path="calc/core.py")
    first = interleave(items, seed=1)
    assert [id(m) for m in first] == [id(m) for m in interleave(items, seed=1)]
    assert sorted(map(id, first)) == sorted(map(id, items))
    kinds = sorted({m.technique for m in items})
    assert sorted(m.technique for m in first[: len(kinds)]) == kinds
    assert all(isinstance(m, Mutation) for m in first)


def test_journal_drops_a_partial_last_line(tmp_path):
    (tmp_path / "tasks.jsonl").write_text(
        json.dumps({"metadata": {"synth": {"candidate_key": "k1", "project": "p"}}}) + '\n{"instance_'
    )
    journal = Journal(tmp_path)
    assert journal.done == {"k1": "p"}
    assert (tmp_path / "tasks.jsonl").read_text().endswith("}\n")


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="jobs >= 1"):
        SynthConfig(out=str(tmp_path), jobs=0)


# -- the pipeline over a fixture project, in real sandboxes --------------------------------------------


class FixtureEnv:
    """An env layer made by hand: /testbed (one-commit git repo) and a /venv that borrows this pytest."""

    def __init__(self, root: Path, test_files: dict[str, str] | None = None) -> None:
        from swebox.envs.sandbox import SandboxPolicy

        self.layer = root / "env"
        testbed = self.layer / "testbed"
        (testbed / "calc").mkdir(parents=True)
        (testbed / "calc" / "__init__.py").write_text("")
        (testbed / "calc" / "core.py").write_text(CALC)
        (testbed / "tests").mkdir()
        for name, text in (test_files or {"test_core.py": TESTS}).items():
            (testbed / "tests" / name).write_text(text)
        # a test file that never collects (a missing test dependency): synthesis must work around it
        (testbed / "tests" / "test_broken.py").write_text("import calc.core\nimport not_installed_anywhere\n")
        git = ["git", "-C", str(testbed), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "snapshot"], check=True)
        (self.layer / "swebox").mkdir()
        venv = self.layer / "venv"
        subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True)
        (venv / "lib" / "python3.11" / "site-packages" / "host.pth").write_text(f"{HOST_SITE}\n")
        self.policy = SandboxPolicy(ro_binds=(str(Path(sys.prefix).resolve()),), command_timeout_s=60)
        self.layers_built: list[dict[str, bytes]] = []

    def sandbox(self):
        from swebox.envs.sandbox import Sandbox

        return Sandbox([self.layer], self.policy).start()

    def task_layer(self, changes, message):
        self.layers_built.append(dict(changes))
        return f"task-{len(self.layers_built)}", f"{len(self.layers_built):040x}"


@pytest.fixture
def fixture_env(tmp_path):
    if not SYSTEM_PYTHON.exists():
        pytest.skip("needs /usr/bin/python3.11 (an interpreter the sandbox uid can reach)")
    return FixtureEnv(tmp_path)


def test_synthesis_over_fixture_project(tmp_path, fixture_env):
    recipe = ProjectRecipe(
        name="calc", repo_path=str(fixture_env.layer / "testbed"), tests=("tests",), max_tasks=3, timeout_s=60
    )
    out = tmp_path / "out"
    config = SynthConfig(out=str(out), jobs=2, seed=0, baseline_runs=3)
    (report,) = synthesize([recipe], config, lambda _r: fixture_env)
    assert report.error == ""
    assert report.stable_tests == 6
    assert report.tasks == 3
    rows = [Task.from_json(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert len({t.instance_id for t in rows}) == 3
    for task, changes in zip(rows, fixture_env.layers_built, strict=True):
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS
        assert set(task.FAIL_TO_PASS).isdisjoint(task.PASS_TO_PASS)
        assert all(t.startswith("tests/test_core.py::test_") for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))
        assert task.test_files == ("tests/test_core.py",)
        assert task.env is not None and task.env.source == recipe.repo_path
        assert task.base_commit and task.task_layer_key
        # the patch turns the buggy file (what the task layer holds) back into the original
        buggy = changes["calc/core.py"].decode()
        assert buggy != CALC
        work = tmp_path / f"apply-{task.instance_id}"
        (work / "calc").mkdir(parents=True)
        (work / "calc" / "core.py").write_text(buggy)
        (work / "fix.diff").write_text(task.patch)
        subprocess.run(["git", "init", "-q"], cwd=work, check=True)
        subprocess.run(["git", "apply", "fix.diff"], cwd=work, check=True)
        assert (work / "calc" / "core.py").read_text() == CALC
        # the statement names the failing tests and never the changed lines
        for test_id in task.FAIL_TO_PASS:
            assert test_id in task.problem_statement
        for line in task.patch.splitlines():
            if line[:1] in "+-" and line[:3] not in ("+++", "---") and len(line[1:].strip()) >= 6:
                assert line[1:].strip() not in task.problem_statement
        assert task.metadata["synth"]["path"] == "calc/core.py"

    # resume: the budget is met, nothing new is tested or written
    (again,) = synthesize([recipe], config, lambda _r: fixture_env)
    assert again.tasks == 0 and again.tried == 0
    assert len((out / "tasks.jsonl").read_text().splitlines()) == 3


UNITTEST_TESTS = """\
import unittest

from calc.core import add, clamp, mean


class CalcTests(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_clamp(self):
        self.assertEqual(clamp(-5, 0, 10), 0)
        self.assertEqual(clamp(50, 0, 10), 10)

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)
"""

# pyflakes' shape: a class in another file reruns every test of CalcTests (JUnit then reports the base's
# file with the subclass's classname)
INHERITED_TESTS = """\
from tests.test_unit import CalcTests


class AgainTests(CalcTests):
    pass
"""


def test_synthesised_ids_of_inherited_unittest_classes_are_gradable(tmp_path):
    """Ids name the collecting module and class, map back to their JUnit keys, and the grader finds them."""
    from swebox.envs.tasks.graders.grading import pytest_args
    from swebox.envs.tasks.graders.junit import parse_junit
    from swebox.envs.tasks.testids import junit_key, match_ids

    if not SYSTEM_PYTHON.exists():
        pytest.skip("needs /usr/bin/python3.11 (an interpreter the sandbox uid can reach)")
    env = FixtureEnv(tmp_path, {"__init__.py": "", "test_unit.py": UNITTEST_TESTS, "test_again.py": INHERITED_TESTS})
    # no tests in the recipe: the tests/ folder is found
    recipe = ProjectRecipe(name="calc", repo_path=str(env.layer / "testbed"), max_tasks=2, timeout_s=60)
    config = SynthConfig(out=str(tmp_path / "out"), jobs=1, seed=0, baseline_runs=2)
    (report,) = synthesize([recipe], config, lambda _r: env)
    # 3 tests x (CalcTests, AgainTests, and CalcTests again: importing a class into a test module collects it)
    assert report.error == "" and report.stable_tests == 9 and report.tasks == 2
    rows = [Task.from_json(line) for line in (tmp_path / "out" / "tasks.jsonl").read_text().splitlines()]
    ids = {t for task in rows for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)}
    classes = {"tests/test_unit.py::CalcTests", "tests/test_again.py::AgainTests", "tests/test_again.py::CalcTests"}
    assert {t.rsplit("::", 1)[0] for t in ids} == classes
    for task in rows:
        # the file the inherited tests are written in is protected like the one that collects them
        assert task.test_files == ("tests/test_again.py", "tests/test_unit.py")
    # the grader's own options and matching, over a real run of the task's test files
    with env.sandbox() as sb:
        options = " ".join(pytest_args(rows[0], "/tmp/g"))
        files = " ".join(rows[0].all_test_files())
        sb.exec(f"mkdir -p /tmp/g && cd /testbed && /venv/bin/python -m pytest {options} {files}", timeout=120)
        results = parse_junit(sb.read_file("/tmp/g/junit.xml")).results
    assert all(junit_key(t) in results for t in ids)
    assert [m for m in match_ids(sorted(ids), results) if m.problem] == []


def test_flaky_and_hanging_candidates_are_rejected(tmp_path, fixture_env):
    """A mutant that hangs is killed by the timeout and rejected, not kept."""
    from swebox.envs.tasks.synth.pipeline import ProjectSynth

    recipe = ProjectRecipe(
        name="calc", repo_path=str(fixture_env.layer / "testbed"), tests=("tests",), max_tasks=1, timeout_s=60
    )
    config = SynthConfig(out=str(tmp_path / "out"), jobs=1, min_timeout_s=2)
    synth = ProjectSynth(recipe, fixture_env, config, Journal(tmp_path / "out"))
    sb = fixture_env.sandbox()
    try:
        from swebox.envs.tasks.synth.runner import SandboxRunner

        runner = SandboxRunner(sb)
        assert synth._prepare(runner)
        synth.timeout_s = 2
        hang = CALC.replace("    total = 0\n", "    total = 0\n    while True:\n        pass\n")

        class Fixed:
            technique = "remove_loop"

            def candidate(self):
                from swebox.envs.tasks.synth.mutations import Candidate

                return Candidate("remove_loop", "calc/core.py", "mean", 14, 16, hang)

        outcome = synth.validate(runner, Fixed())
        assert outcome.reason == "timeout"
    finally:
        sb.close()


def test_tests_missing_from_the_repository_fail_the_project_with_a_hint(tmp_path, fixture_env):
    recipe = ProjectRecipe(
        name="calc", repo_path=str(fixture_env.layer / "testbed"), tests=("test",), max_tasks=1, timeout_s=60
    )
    (report,) = synthesize([recipe], SynthConfig(out=str(tmp_path / "out"), jobs=1), lambda _r: fixture_env)
    assert report.tasks == 0 and report.tried == 0
    assert report.error == (
        "the tests ['test'] are not in the repository; its tests are in ['tests']: "
        "set `tests:` in the recipe (or --tests)"
    )
