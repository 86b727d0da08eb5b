"""What to synthesise tasks from: a project (PyPI requirement or local git repository) plus its test recipe.

``configs/corpus/default.yaml`` lists projects with their recipes; ``project_from_requirement("toolz==1.2.0")``
and ``project_from_repo(path)`` make a one-project corpus from the command line.
"""

from __future__ import annotations

import configparser
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import tomllib
import yaml
from swebox.envs.cache import EnvSpec
from swebox.envs.sandbox.strict import checked_fields
from swebox.envs.tasks.synth import npm

_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


class RecipeError(ValueError):
    """A project, repository or recipe file that cannot be synthesised from; one line that says how to fix it
    (``swebox tasks synth`` prints it without a traceback)."""


@dataclass(frozen=True)
class ProjectRecipe:
    """One project to synthesise tasks from, and how to run its tests."""

    name: str
    """Project name (PyPI name, or the repository folder's name); used in instance ids."""
    version: str = ""
    """Pinned PyPI version; '' for a local repository."""
    repo_path: str = ""
    """Absolute path of a local git repository; '' for a PyPI project."""
    tests: tuple[str, ...] = ()
    """Paths pytest collects, relative to the repository root; empty: found by :func:`find_test_paths`."""
    test_deps: tuple[str, ...] = ()
    """Extra pip requirements the tests need (pytest itself is always installed)."""
    pytest_args: tuple[str, ...] = ()
    """Extra pytest options for every run (e.g. '-p', 'no:cov')."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for test runs."""
    timeout_s: float = 120.0
    """Hard limit of one full-suite run in seconds; a mutant run gets min(this, 10 x the baseline time)."""
    max_tasks: int = 40
    """Validated tasks to keep for this project."""
    python: str = "3.11"
    """Interpreter version of the environment (JavaScript projects too: the log grader's monitor runs on it)."""
    language: str = "python"
    """'python' (pytest, read from JUnit XML) or 'javascript' (Node's runner, its TAP log read by SWE-bench's
    parser: :mod:`.npm`)."""
    package: str = ""
    """The registry package a local repository was made from ('npm:minimist@1.2.8'); names the label."""

    def __post_init__(self) -> None:
        if self.language not in ("python", "javascript"):
            raise RecipeError(
                f"project {self.name!r}: language must be 'python' or 'javascript'; found {self.language!r}."
            )
        if self.language == "javascript" and not (self.repo_path and self.tests):
            raise RecipeError(
                f"project {self.name!r}: a JavaScript project needs repo_path and tests (its test "
                "folders); make it with project_from_npm('npm:NAME@VERSION')."
            )
        if bool(self.version) == bool(self.repo_path):
            raise RecipeError(
                f"project {self.name!r}: expected exactly one of version (PyPI) or repo_path (local git); "
                f"found version={self.version!r}, repo_path={self.repo_path!r}. Set one of them."
            )
        if self.repo_path and not Path(self.repo_path).is_absolute():
            raise RecipeError(f"project {self.name!r}: repo_path must be absolute; found {self.repo_path!r}.")
        for name in ("tests", "test_deps", "pytest_args"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise RecipeError(f"project {self.name!r}: {name} must be a list of strings; found {value!r}.")
            object.__setattr__(self, name, tuple(value))
        if self.timeout_s <= 0 or self.max_tasks < 0:
            raise RecipeError(
                f"project {self.name!r}: expected timeout_s > 0 and max_tasks >= 0; found "
                f"{self.timeout_s}, {self.max_tasks}."
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise RecipeError(f"project {self.name!r}: env must map strings to strings; found {self.env!r}.")

    @property
    def label(self) -> str:
        """'toolz-1.2.0', 'minimist-1.2.8' (an npm package) or the repository's name."""
        if self.package:
            return f"{self.name}-{self.package.rpartition('@')[2]}"
        return f"{self.name}-{self.version}" if self.version else self.name

    @property
    def task_version(self) -> str:
        """Task.version of the project's tasks: the PyPI or npm version ('' for a local repository)."""
        return self.package.rpartition("@")[2] if self.package else self.version

    @property
    def log_parser(self) -> str:
        """The parser of the project's test log ('' for pytest projects: their runner reads JUnit XML)."""
        return npm.LOG_PARSER if self.language == "javascript" else ""

    def env_spec(self) -> EnvSpec:
        """The environment the project's tasks run in."""
        deps = ("pytest", *self.test_deps)
        if self.version:
            return EnvSpec(source=f"pypi:{self.name}=={self.version}", python=self.python, test_deps=deps)
        commit = subprocess.run(
            ["git", "-C", self.repo_path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if self.language == "javascript":
            return npm.env_spec(self.repo_path, commit, self.python)
        return EnvSpec(source=self.repo_path, commit=commit, python=self.python, test_deps=deps)

    def test_cmd(self) -> str:
        """The Task.test_cmd: the interpreter plus the recipe's pytest options (JavaScript: Node's runner)."""
        import shlex

        if self.language == "javascript":
            return npm.test_cmd(self.tests)
        return " ".join(["/venv/bin/python", "-m", "pytest", *(shlex.quote(a) for a in self.pytest_args)])


_TEST_DIRS = ("tests", "test", "testing")
_CONFIGS = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def find_test_paths(files: Iterable[str], read: Callable[[str], str]) -> tuple[str, ...]:
    """The paths a project's tests live in, from its tracked ``files`` (``read`` gives a file's text).

    pytest's own ``testpaths`` setting when a config file has one that exists; otherwise the outermost
    tests/test/testing folders holding test modules (``tests``, ``pkg/tests``), plus test modules at the
    repository root. Empty when there are none.
    """
    files = set(files)
    folders = {str(PurePosixPath(f).parent) for f in files}
    for config in (c for c in _CONFIGS if c in files):
        listed = [p.strip("/") for p in _testpaths(config, read(config))]
        found = tuple(p for p in listed if p in files or p in folders)
        if found:
            return found
    paths = set()
    for f in files:
        path = PurePosixPath(f)
        if not (path.name.startswith("test_") or path.name.endswith("_test.py")) or path.suffix != ".py":
            continue
        dirs = [i for i, part in enumerate(path.parts[:-1]) if part in _TEST_DIRS]
        if dirs:
            paths.add("/".join(path.parts[: dirs[0] + 1]))
        elif len(path.parts) == 1:
            paths.add(f)
    return tuple(sorted(paths))


def _testpaths(config: str, text: str) -> list[str]:
    """pytest's ``testpaths`` from one config file (empty when it sets none or does not parse)."""
    try:
        if config == "pyproject.toml":
            value = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options", {}).get("testpaths")
            return [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        section = "tool:pytest" if config == "setup.cfg" else "pytest"
        return parser.get(section, "testpaths", fallback="").split()
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError):
        return []


def project_from_requirement(requirement: str, **overrides: Any) -> ProjectRecipe:
    """``"toolz==1.2.0"`` -> a recipe with default test settings (``tests`` found in the repository)."""
    match = _REQUIREMENT.match(requirement.strip())
    if not match:
        raise RecipeError(f"--project: expected NAME==VERSION with an exact pin; found {requirement!r}.")
    return ProjectRecipe(name=match["name"], version=match["version"], **overrides)


def project_from_npm(spec: str, cache: str | Path | None = None, **overrides: Any) -> ProjectRecipe:
    """``"npm:minimist@1.2.8"`` -> a JavaScript recipe over the package's one-commit repository (downloaded
    once into ``cache``, default :func:`npm.default_cache`); its tests are the test folders it ships."""
    try:
        name, _ = npm.parse_spec(spec)
        repo = npm.npm_repository(spec, cache or npm.default_cache())
    except npm.NpmError as exc:
        raise RecipeError(str(exc)) from None
    tests = tuple(overrides.pop("tests", None) or npm.test_paths(repo))
    if not tests:
        raise RecipeError(
            f"{spec}: expected a test folder ({', '.join(npm.TEST_DIRS)}) in the published package; "
            "found none: the package does not ship its tests, pick another or another version."
        )
    return ProjectRecipe(name=name, repo_path=str(repo), language="javascript", package=spec, tests=tests, **overrides)


def project_from_repo(path: str | Path, **overrides: Any) -> ProjectRecipe:
    """A local git repository (its HEAD is the snapshot)."""
    repo = Path(path).resolve()
    if not (repo / ".git").exists():
        raise RecipeError(f"--repo: expected a git repository; {repo} has no .git. Run `git init` and commit.")
    return ProjectRecipe(name=repo.name, repo_path=str(repo), **overrides)


def load_recipe(path: str | Path) -> list[ProjectRecipe]:
    """The projects of a corpus recipe YAML (``defaults`` apply to every project)."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("projects"), list):
        raise RecipeError(f"{path}: expected a mapping with a 'projects' list; see configs/corpus/default.yaml.")
    defaults = data.get("defaults") or {}
    projects = []
    for i, entry in enumerate(data["projects"]):
        merged = checked_fields(ProjectRecipe, {**defaults, **(entry or {})}, what=f"{path}: project #{i}")
        if "version" in merged:
            merged["version"] = str(merged["version"])
        projects.append(ProjectRecipe(**merged))
    names = [p.label for p in projects]
    if len(set(names)) != len(names):
        raise RecipeError(f"{path}: a project is listed twice: {sorted(n for n in names if names.count(n) > 1)}.")
    return projects
