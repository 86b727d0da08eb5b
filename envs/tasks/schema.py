"""The task record: a superset of a SWE-bench instance plus what swebox needs to build and grade it.

A task serialises to one JSON object (one line of a ``.jsonl`` file) with the SWE-bench keys first, then
swebox's. ``Task.from_json(t.to_json()) == t`` and ``Task.from_json(s).to_json() == s`` for every line ``s``
that ``to_json`` wrote: the round trip is exact.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.cache.spec import EnvSpec
from swebox.envs.sandbox.strict import strict_from_dict
from swebox.envs.tasks.testids import file_of_test

SWEBENCH_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "version",
    "environment_setup_commit",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "created_at",
)
DEFAULT_TEST_CMD = "/venv/bin/python -m pytest"
_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS", "test_files", "setup_commands", "eval_commands")
LIST_FIELDS = _LIST_FIELDS
"""The fields that hold lists of strings (a loaded row may give them as a JSON string of one)."""
_ID = re.compile(r"^[^\s/]+$")
GRADERS = ("junit", "log", "harbor")
NETWORKS = ("none", "user")
"""Task.network values: the grading sandbox's network (SandboxPolicy.network's)."""
CONFIRMS = ("", "runner", "off")
"""Task.confirm values: '' (the default rule), 'runner', 'off'."""
LANGUAGES = frozenset({"python", "javascript", "typescript", "go", "rust", "java", "c", "cpp"})
"""Task.language values swebox grades: Python with either grader; the others from their test log (grader='log':
SWE-bench's JavaScript, Go, Rust, Java and C/C++ parsers read their runners' logs; swebox's JUnit runner is
pytest's)."""


class TaskError(ValueError):
    """A task record that breaks the schema; the message says expected / found / how to fix."""


def _fail(field_name: str, expected: str, found: Any, fix: str) -> TaskError:
    shown = repr(found)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return TaskError(f"Task.{field_name}: expected {expected}; found {shown}. {fix}")


@dataclass
class Task:
    """One SWE problem: a repository snapshot with a bug, the fix, and the tests that tell them apart."""

    instance_id: str
    """Unique id, e.g. 'django__django-11099' or 'toolz-1.2.0.op_swap.3f2a'; no whitespace or '/'."""
    repo: str = ""
    """Where the code comes from, 'owner/name' for GitHub projects or the PyPI project name."""
    base_commit: str = ""
    """The snapshot the agent starts from (the buggy code), as a git commit id when there is one."""
    patch: str = ""
    """The gold fix: a unified git diff against base_commit touching only source files."""
    test_patch: str = ""
    """A diff adding or updating tests, applied before grading (the hidden tests); '' when none."""
    problem_statement: str = ""
    """The issue text shown to the agent."""
    hints_text: str = ""
    """Extra hints (SWE-bench's issue comments); not shown by default."""
    version: str = ""
    """Project version the task belongs to (SWE-bench groups environments by it)."""
    environment_setup_commit: str = ""
    """Commit whose dependencies the environment installs (SWE-bench); '' when it is base_commit."""
    FAIL_TO_PASS: tuple[str, ...] = ()
    """Tests that fail on base_commit and must pass after the fix."""
    PASS_TO_PASS: tuple[str, ...] = ()
    """Tests that pass before and must still pass after the fix."""
    created_at: str = ""
    """When the task (or its upstream issue) was created, ISO 8601."""
    env: EnvSpec | None = None
    """The environment (repository snapshot + interpreter + install) the task runs in; None until known."""
    task_layer_key: str = ""
    """Cache key of the task's own layer (its delta over the env layer); '' when it has none."""
    bug_patch: str = ""
    """A diff applied on top of base_commit to reach the starting state (SWE-smith); '' when not needed."""
    test_cmd: str = DEFAULT_TEST_CMD
    """How tests run in /testbed: '<python> -m pytest [options]'; the grader adds ids, JUnit and hardening."""
    grader: str = "junit"
    """How the verdict is read: 'junit' (swebox's pytest runner and JUnit XML), 'log' (test_cmd's output
    read by log_parser, as SWE-bench's harness does) or 'harbor' (a Harbor task's tests/test.sh and the
    reward file it writes; FAIL_TO_PASS may then be empty)."""
    log_parser: str = ""
    """With grader='log': which parser reads the log: a SWE-bench repo key such as 'django/django' (that
    repo's parser), or 'pytest' for plain pytest -rA logs; '' with 'junit'."""
    eval_commands: tuple[str, ...] = ()
    """With grader='log': shell commands run in /testbed before test_cmd at grading (SWE-bench specs'
    eval_commands, e.g. locale exports)."""
    confirm: str = ""
    """With grader='log': how a resolved log verdict is confirmed. 'runner': the FAIL_TO_PASS tests run again
    in a fresh sandbox under swebox's pytest runner (the JUnit grader's path: pinned report channel, watchdog,
    canaries) and must not fail there, which closes the log's targeted gap (docs/tasks.md); 'off': the log
    alone decides. '' (the default) follows the rule of ``log_parsers.default_confirm``: 'runner' for a
    pytest-family parser, 'off' for the others and for pytest-dev/pytest (see ``confirm_mode``). Part of the
    record, fixed before any agent acts; never switched at grading time. '' with 'junit' and 'harbor'."""
    expected_status: dict[str, str] = field(default_factory=dict)
    """Test id -> status it must end with (R2E-Gym's expected_output_json, FAILED ones included); when
    non-empty, resolved also needs every one to match."""
    test_files: tuple[str, ...] = ()
    """Repository-relative test files the grader restores; defaults to the files named by the test ids."""
    hidden_tests: bool = False
    """True when the FAIL_TO_PASS tests are hidden from the agent (they arrive with test_patch at grading)."""
    language: str = "python"
    """Programming language of the repository, one of LANGUAGES; grader='junit' needs 'python', the others
    are graded from their test log (grader='log') or by a Harbor task's tests."""
    setup_commands: tuple[str, ...] = ()
    """Shell commands run in /testbed before the agent starts (e.g. apply a recipe); usually empty."""
    network: str = "none"
    """The network its tests get when graded, one of NETWORKS: 'none' (loopback only, the default) or 'user'
    (outbound through a user-mode stack, slirp4netns, as SWE-bench's harness grades every row in a container
    with network): for a row whose tests fetch from the internet (requests' httpbin.org). The code under test
    can then reach the internet too. `swebox tasks validate` names a gold patch that fails on network errors."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Anything else (source dataset, mutation kind, ...); must be JSON-serialisable."""

    def __post_init__(self) -> None:
        for name in _LIST_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                raise _fail(name, "a list of strings", value, 'Write it as a JSON list, e.g. ["a", "b"].')
            if not all(isinstance(v, str) and v.strip() for v in value):
                raise _fail(name, "non-empty strings only", value, "Remove empty or non-string entries.")
            setattr(self, name, tuple(value))
        text_fields = [f for f in SWEBENCH_FIELDS if f not in _LIST_FIELDS]
        strings = ("task_layer_key", "bug_patch", "test_cmd", "grader", "log_parser", "confirm", "language", "network")
        for name in (*text_fields, *strings):
            if not isinstance(getattr(self, name), str):
                raise _fail(name, "a string", getattr(self, name), "Convert the value to a string.")
        if not _ID.match(self.instance_id):
            raise _fail(
                "instance_id",
                "a non-empty id without whitespace or '/'",
                self.instance_id,
                "Use e.g. 'owner__repo-123'.",
            )
        self._check_tests()
        self._check_grader()
        self._check_test_cmd()
        if isinstance(self.env, dict):
            self.env = EnvSpec.from_dict(self.env)
        if self.env is not None and not isinstance(self.env, EnvSpec):
            raise _fail("env", "an EnvSpec, its dict, or None", self.env, "See swebox.envs.cache.EnvSpec.")
        if self.network not in NETWORKS:
            raise _fail("network", f"one of {NETWORKS}", self.network, "Use 'user' for tests that need the internet.")
        if not isinstance(self.hidden_tests, bool):
            raise _fail("hidden_tests", "true or false", self.hidden_tests, "Use a JSON boolean.")
        if not isinstance(self.metadata, dict):
            raise _fail("metadata", "a JSON object", self.metadata, "Use {} for no metadata.")
        try:
            json.dumps(self.metadata)
        except (TypeError, ValueError) as exc:
            raise _fail("metadata", "JSON-serialisable values", self.metadata, f"({exc}).") from None
        if self.language not in LANGUAGES:
            raise _fail(
                "language",
                f"one of {sorted(LANGUAGES)}",
                self.language,
                "Name the repository's language as swebox does (Multi-SWE-bench's 'c++' is 'cpp').",
            )
        if self.language != "python" and self.grader == "junit":
            raise _fail(
                "grader",
                f"'log' (or 'harbor') for a {self.language} task",
                self.grader,
                "Grade it from its runner's log with that language's parser (log_parser 'tap', 'go_test', "
                "'cargo', ...).",
            )

    def _check_tests(self) -> None:
        if not self.FAIL_TO_PASS and self.grader != "harbor":  # a Harbor task's test.sh says the reward
            raise _fail(
                "FAIL_TO_PASS",
                "at least one test id",
                list(self.FAIL_TO_PASS),
                "A task needs a test that fails before the fix; without one it cannot be graded.",
            )
        for name in ("FAIL_TO_PASS", "PASS_TO_PASS", "test_files"):
            values = getattr(self, name)
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise _fail(name, "each entry once", dupes, "Remove the duplicates.")
        both = sorted(set(self.FAIL_TO_PASS) & set(self.PASS_TO_PASS))
        if both:
            raise _fail("PASS_TO_PASS", "no id also in FAIL_TO_PASS", both, "A test is either F2P or P2P.")
        for path in self.test_files:
            if path.startswith("/") or ".." in path.split("/"):
                raise _fail("test_files", "repository-relative paths", path, "Drop the leading '/' or '..'.")

    def _check_grader(self) -> None:
        from swebox.envs.tasks.graders import log_parsers  # the parsers' names and statuses live with them

        if self.grader not in GRADERS:
            raise _fail(
                "grader",
                f"one of {list(GRADERS)}",
                self.grader,
                "Use 'junit' for swebox's own tasks, 'log' for SWE-bench-family rows, 'harbor' for "
                "Harbor task folders.",
            )
        if self.grader == "harbor" and (self.log_parser or self.eval_commands):
            raise _fail(
                "log_parser",
                "'' and no eval_commands with grader='harbor'",
                self.log_parser,
                "A Harbor task's tests/test.sh grades it; drop log_parser/eval_commands.",
            )
        if self.grader == "junit" and (self.log_parser or self.eval_commands):
            found = {"log_parser": self.log_parser, "eval_commands": list(self.eval_commands)}
            raise _fail(
                "log_parser",
                "'' and no eval_commands with grader='junit'",
                found,
                "Set grader='log' to grade from the test log, or drop log_parser/eval_commands.",
            )
        if self.grader == "log":
            problem = log_parsers.check_parser_name(self.log_parser)
            if problem:
                raise _fail("log_parser", "a parser name with grader='log'", self.log_parser, problem)
            if not self.test_cmd.strip():
                raise _fail(
                    "test_cmd",
                    "the shell command that runs the tests",
                    self.test_cmd,
                    "With grader='log' it is SWE-bench's test command with the test directives appended.",
                )
        self._check_confirm()
        if not isinstance(self.expected_status, dict):
            raise _fail(
                "expected_status",
                "a JSON object of test id -> status",
                self.expected_status,
                "Use {} when the task has none.",
            )
        bad = {
            k: v
            for k, v in self.expected_status.items()
            if not (isinstance(k, str) and k.strip()) or log_parsers.normal_status(v) is None
        }
        if bad:
            raise _fail(
                "expected_status",
                f"non-empty test ids mapped to one of {list(log_parsers.STATUS_NAMES)}",
                bad,
                "Write statuses as R2E-Gym does (PASSED, FAILED, ...) or swebox's (passed, ...).",
            )

    def _check_confirm(self) -> None:
        from swebox.envs.tasks.graders import log_parsers

        if self.confirm not in CONFIRMS:
            raise _fail("confirm", f"one of {list(CONFIRMS)}", self.confirm, "Use '' for the default rule.")
        if self.confirm and self.grader != "log":
            raise _fail(
                "confirm",
                f"'' with grader={self.grader!r}",
                self.confirm,
                "Only a log-graded task's verdict is confirmed (the JUnit grader runs swebox's runner already).",
            )
        if self.confirm == "runner" and self.log_parser not in log_parsers.PYTEST_FAMILY:
            raise _fail(
                "confirm",
                f"'off' or '' for log parser {self.log_parser!r}",
                self.confirm,
                "The confirmation reruns pytest; only a pytest-family log (log_parsers.PYTEST_FAMILY) can have it.",
            )

    def _check_test_cmd(self) -> None:
        if self.grader != "junit":
            return  # the log grader runs test_cmd as a shell command; its checks live with that grader
        try:
            argv = shlex.split(self.test_cmd)
        except ValueError as exc:
            raise _fail("test_cmd", "a shell-quoted command", self.test_cmd, f"({exc}).") from None
        if len(argv) < 3 or argv[1:3] != ["-m", "pytest"] or not argv[0].startswith("/"):
            raise _fail(
                "test_cmd",
                "'<absolute python> -m pytest [options]'",
                self.test_cmd,
                f"Use e.g. {DEFAULT_TEST_CMD!r} plus options; the grader runs pytest itself.",
            )

    @property
    def env_key(self) -> str:
        """The env layer's cache key ('' while env is unknown)."""
        return self.env.key() if self.env is not None else ""

    @property
    def confirm_mode(self) -> str:
        """'runner' when a resolved log verdict is confirmed under swebox's runner, else 'off' (junit and
        harbor tasks: 'off'; they have nothing to confirm)."""
        if self.grader != "log":
            return "off"
        if self.confirm:
            return self.confirm
        from swebox.envs.tasks.graders import log_parsers

        return log_parsers.default_confirm(self.log_parser)

    @property
    def python(self) -> str:
        """The interpreter test_cmd names."""
        return shlex.split(self.test_cmd)[0]

    @property
    def pytest_options(self) -> list[str]:
        """The options test_cmd passes to pytest."""
        return shlex.split(self.test_cmd)[3:]

    def all_test_files(self) -> tuple[str, ...]:
        """test_files plus every file a test id names, in order, without duplicates."""
        named = (file_of_test(t) for t in (*self.FAIL_TO_PASS, *self.PASS_TO_PASS))
        return tuple(dict.fromkeys([*self.test_files, *(f for f in named if f)]))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; SWE-bench keys first, tuples as lists, env as its dict."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, EnvSpec):
                value = value.to_dict()
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        """Inverse of :meth:`to_dict`; unknown or missing keys are errors that name them."""
        return strict_from_dict(
            cls,
            data,
            what="Task",
            error=TaskError,
            fix="One task (a JSON object) per line: put extra information under 'metadata', or load "
            "a dataset's file with swebox.envs.tasks.load (it maps foreign rows).",
        )

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Task:
        """Inverse of :meth:`to_json`."""
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"Task: expected one JSON object; found invalid JSON ({exc}).") from None
        return cls.from_dict(data)
