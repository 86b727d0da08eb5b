"""What differs between synthesising from a Python and from a JavaScript project, in one place.

The pipeline (:mod:`.pipeline`) is the same for both: a runner with ``files``/``run``/``read_text``, a pool
of mutations with ``technique``/``candidate()``, and the grading fields of the task rows. Python projects
run pytest and are read from JUnit XML (:class:`.runner.SandboxRunner`), mutated with libcst
(:mod:`.mutations`) and graded by the 'junit' grader; JavaScript projects run Node's test runner, read by
SWE-bench's TAP parser (:class:`.log_runner.LogRunner`), are mutated through acorn (:mod:`.js_mutations`)
and graded by the 'log' grader with that parser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from swebox.envs.tasks.synth import npm
from swebox.envs.tasks.synth.js_mutations import is_mutable_js, js_mutations
from swebox.envs.tasks.synth.log_runner import LogRunner
from swebox.envs.tasks.synth.mutations import Candidate, is_mutable_path, mutations
from swebox.envs.tasks.synth.recipe import ProjectRecipe
from swebox.envs.tasks.synth.runner import RunResult, SandboxRunner


class Runner(Protocol):
    """Runs a project's tests in one sandbox (SandboxRunner for pytest, LogRunner for log-graded runners)."""

    files: frozenset[str]

    def run(self, changes: Mapping[str, str | bytes], paths: Sequence[str], timeout_s: float) -> RunResult:
        """Write ``changes``, run the tests of ``paths``, reset the sandbox."""

    def read_text(self, rel: str) -> str:
        """A file of the pristine repository."""


class BugSite(Protocol):
    """One candidate bug site (:class:`.mutations.Mutation` or :class:`.js_mutations.JsMutation`)."""

    @property
    def technique(self) -> str:
        """The mutation technique's name."""

    def candidate(self) -> Candidate | None:
        """The mutated file, or None when the site yields nothing valid."""


def make_runner(sandbox: Any, recipe: ProjectRecipe) -> Runner:
    """The runner of ``recipe``'s tests over a started sandbox."""
    if recipe.language == "javascript":
        return LogRunner(sandbox, recipe.test_cmd(), recipe.log_parser, recipe.env)
    return SandboxRunner(sandbox, recipe.pytest_args, recipe.env)


def bug_sites(recipe: ProjectRecipe, files: Sequence[str], read: Callable[[str], str], seed: int) -> list[BugSite]:
    """Every mutation site of the project's source files (tests, docs and builds excluded)."""
    pool: list[BugSite] = []
    if recipe.language == "javascript":
        sources = {}
        for rel in files:
            if is_mutable_js(rel):
                try:
                    sources[rel] = read(rel)
                except UnicodeDecodeError:
                    continue
        return list(js_mutations(sources, npm.default_cache() / "tools"))
    for rel in files:
        if not is_mutable_path(rel):
            continue
        try:
            pool += mutations(read(rel), path=rel, seed=seed)
        except (ValueError, UnicodeDecodeError):
            continue
    return pool


def grading_fields(recipe: ProjectRecipe, files: Sequence[str]) -> dict[str, Any]:
    """The Task fields that say how a task of ``recipe`` is graded ({} for pytest projects: the defaults).

    A JavaScript task's protected test files are every tracked file in its test folders: the ids name
    test files, but those require helpers and fixtures beside them, which the agent must not change either."""
    if recipe.language != "javascript":
        return {}
    folders = tuple(t.rstrip("/") + "/" for t in recipe.tests)
    tests = [f for f in files if f in recipe.tests or f.startswith(folders)]
    return {"grader": "log", "log_parser": recipe.log_parser, "language": "javascript", "test_files": tuple(tests)}
