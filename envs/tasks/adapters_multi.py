"""Rows of the multilingual datasets as :class:`Task` records: Multi-SWE-bench, SWE-rebench-V2, and SWE-smith's
Go and Rust sets. Each becomes a log-graded task (``grader='log'``) of its language.

- Multi-SWE-bench / Multi-SWE-RL (ByteDance-Seed): ``org, repo, number, base {label, ref, sha}, fix_patch,
  test_patch, resolved_issues [{number, title, body}], title, body``, and per-test transition maps
  ``f2p_tests, p2p_tests, s2p_tests, n2p_tests, fixed_tests`` ({test: {run, test, fix}} with statuses PASS,
  FAIL, SKIP, NONE). Its harness keeps a test command and a parser per repository class, not in the row;
  here Go rows run ``go test -v -count=1 ./...`` and Rust rows ``cargo test --no-fail-fast`` (what its Go
  and Rust repositories' scripts run, every test binary run), Java rows ``mvn test`` (or ``./gradlew test``
  for its Gradle repositories) after an install that resolves the build's artifacts, read by its rules
  (:mod:`.graders.lang_parsers`; Java ids are test classes, or Gradle's ``Class > method`` and tasks).
  The language comes from the row's ``language``/``lang`` column (the per-language files' folder names: go,
  rust, java, ...).
- SWE-rebench-V2 (nebius): SWE-bench's keys plus ``language``, ``image_name`` and ``install_config``
  ({``test_cmd``, ``log_parser``, ``install``, ``base_image_name``, ``docker_specs``}); the row names its
  test command and its parser (SWE-bench's function names; ``parse_log_pytest`` is swebox's 'pytest').
- SWE-smith's other languages: SWE-smith's columns, the bug as ``patch``; Go ids are ``go test`` names and
  Rust ids ``cargo test`` paths, run as its Go and Rust profiles do.

The start state is the Python datasets' rule: the agent sees ``base_commit``'s tree (SWE-smith: with the
bug applied) as one commit (a checkout layer). The environment clones the repository (network at build
time, or a git mirror) and is built and graded on the language's toolchain layer (``EnvSpec.toolchains``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from swebox.envs.cache.checkout import CheckoutSpec
from swebox.envs.cache.spec import EnvSpec
from swebox.envs.tasks.graders import lang_parsers, log_parsers
from swebox.envs.tasks.rows import TASK_FIELDS, extra, id_list
from swebox.envs.tasks.schema import LANGUAGES, TaskError

_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_ANSI = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
_LANGUAGE_NAMES = {"golang": "go", "c++": "cpp", "rs": "rust"}
TOOLCHAIN = {"go": "go", "rust": "rust", "c": "cc", "cpp": "cc", "java": "jdk"}
"""The toolchain layer (``cache.toolchains``) each language's env is built and graded on."""
DEFAULT_TEST_CMD = {"go": "go test -v -count=1 ./...", "rust": "cargo test --no-fail-fast"}
"""The test command of a language whose rows do not name one (Multi-SWE-bench's and SWE-smith's Go and Rust).
``--no-fail-fast``: cargo otherwise stops at the first test binary with a failure, and the tests of the later
binaries (the canaries among them) go missing; the verdict of the tests that ran is the same."""
MSB_PARSER = {"go": lang_parsers.MSB_GO, "rust": lang_parsers.MSB_RUST, "java": lang_parsers.MSB_MAVEN}
MSB_GRADLE_REPOS = frozenset(
    {
        "mockito/mockito",
        "elastic/logstash",
        "elastic/elasticsearch",
        "spotbugs/spotbugs",
        "ReactiveX/RxJava",
        "junit-team/junit5",
        "micronaut-projects/micronaut-core",
    }
)
"""Multi-SWE-bench's Java repositories whose harness class runs ``./gradlew`` (its other Java classes run
Maven: ``mvn`` or the repository's ``./mvnw``)."""
MSB_JAVA = {
    lang_parsers.MSB_MAVEN: (
        "mvn -B -V --no-transfer-progress test -Dmaven.test.failure.ignore=true -DfailIfNoTests=false",
        "mvn -B -o -V --no-transfer-progress test -Dsurefire.useFile=false -Dmaven.test.skip=false"
        " -DfailIfNoTests=false",
    ),
    lang_parsers.MSB_GRADLE: ("./gradlew testClasses --no-daemon", "./gradlew test --no-daemon --continue"),
}
"""Java parser -> (the env build's install command, the test command): its classes' ``run.sh`` command, Maven
from the jdk layer for ``./mvnw`` (whose wrapper downloads Maven) and offline (``-o``: the install filled the
env's Maven repository, from Debian's ``maven-repo`` in the jdk layer first, then Maven Central)."""
_OFFLINE_HINT = (
    " || {{ echo 'swebox: the env build of {repo} (a Multi-SWE-bench Java row) could not get its build tool,"
    " plugins or dependencies: the jdk layer holds only Debian'''s Maven and maven-repo artifacts, the rest"
    " come from Maven Central or Gradle'''s servers; build this env where they are reachable' >&2; exit 1; }}"
)
"""Appended to a Java row's install: the build tool's own error names the artifact; this line says why."""
SWESMITH_PARSER = {"go": lang_parsers.GO_TEST, "rust": lang_parsers.CARGO}
_PYTEST_NAMES = {"parse_log_pytest": log_parsers.PYTEST}
"""SWE-rebench-V2's parser names that swebox knows under another name."""
_GO_ID = re.compile(r"^(Test|Example|Benchmark|Fuzz)\w*(/\S*)?$")
_RUST_ID = re.compile(r"^[A-Za-z_][\w]*(::[A-Za-z_][\w]*)+$")


def language(row: dict[str, Any], *keys: str) -> str:
    """The row's language in swebox's names (one of LANGUAGES); TaskError when it has none or another."""
    found = next((str(row[k]) for k in keys if row.get(k)), "")
    name = _LANGUAGE_NAMES.get(found.lower(), found.lower())
    if name not in LANGUAGES:
        raise TaskError(
            f"Task.language: expected one of {sorted(LANGUAGES)} in the row's "
            f"{' or '.join(repr(k) for k in keys)}; found {found!r}. Load that language's file, or "
            "drop rows of languages swebox does not grade yet."
        )
    return name


def _commit(value: Any, key: str) -> str:
    text = str(value or "")
    if not _HEX.match(text):
        raise TaskError(f"Task.{key}: expected a hex git commit id; found {text[:60]!r}. Fix the row's {key}.")
    return text


def _start(fields: dict[str, Any], repo: str, commit: str, bug: str, lang: str, install: tuple[str, ...]) -> None:
    """The env clones ``repo`` at ``commit``; the agent starts from it (+ ``bug``) as one commit."""
    tools = (TOOLCHAIN[lang],) if lang in TOOLCHAIN else ()
    env = EnvSpec(
        source=f"git+https://github.com/{repo}.git", commit=commit, install=install, test_deps=(), toolchains=tools
    )
    fields["env"] = env
    fields["task_layer_key"] = CheckoutSpec(env=env, commit=commit, patch=bug, commands=()).key()
    fields["metadata"]["checkout"] = {"commit": commit, "commands": []}
    fields["language"] = lang


def from_multi_swe_bench(row: dict[str, Any]) -> dict[str, Any]:
    """A Multi-SWE-bench / Multi-SWE-RL row (see the module docstring)."""
    org, name, number = str(row.get("org") or ""), str(row.get("repo") or ""), row.get("number")
    if not org or not name or "/" in name:
        raise TaskError(
            f"Task.repo: expected Multi-SWE-bench's 'org' and 'repo' (a name without '/'); found "
            f"org={org!r}, repo={name!r}."
        )
    lang = language(row, "language", "lang")
    if lang not in MSB_PARSER:
        raise TaskError(
            f"Task.log_parser: Multi-SWE-bench keeps a parser per {lang} repository in its harness, "
            f"not in the row; swebox reads its Go, Rust and Java rows only. Found language {lang!r}."
        )
    parser = MSB_PARSER[lang]
    test_cmd, install = DEFAULT_TEST_CMD.get(lang, ""), tuple[str, ...]()
    if lang == "java":
        parser = lang_parsers.MSB_GRADLE if f"{org}/{name}" in MSB_GRADLE_REPOS else parser
        build, test_cmd = MSB_JAVA[parser]
        install = (build + _OFFLINE_HINT.format(repo=f"{org}/{name}"),)
    base = row.get("base") or {}
    if isinstance(base, str):
        base = json.loads(base)
    f2p, p2p = transitions(row)
    issues = row.get("resolved_issues") or []
    statement = (
        "\n\n".join(f"{i.get('title') or ''}\n{i.get('body') or ''}".strip() for i in issues if isinstance(i, dict))
        or f"{row.get('title') or ''}\n{row.get('body') or ''}".strip()
    )
    used = {
        "org",
        "repo",
        "number",
        "base",
        "fix_patch",
        "test_patch",
        "resolved_issues",
        "instance_id",
        "language",
        "lang",
        *_TRANSITION_KEYS,
    }
    fields: dict[str, Any] = {
        "instance_id": str(row.get("instance_id") or f"{org}__{name}-{number}"),
        "repo": f"{org}/{name}",
        "base_commit": _commit(base.get("sha"), "base_commit"),
        "patch": str(row.get("fix_patch") or ""),
        "test_patch": str(row.get("test_patch") or ""),
        "problem_statement": statement,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "grader": "log",
        "log_parser": parser,
        "test_cmd": test_cmd,
        "metadata": {**extra(row, used), "source": "multi-swe-bench", "number": number},
    }
    _start(fields, fields["repo"], fields["base_commit"], "", lang, install)
    return fields


_TRANSITION_KEYS = ("f2p_tests", "p2p_tests", "s2p_tests", "n2p_tests", "fixed_tests")


def transitions(row: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(F2P, P2P) from the transition maps by each test's statuses, as Multi-SWE-bench grades: a test that
    passes with the fix and did not pass with the test patch alone must become a pass; one that passed
    with both must stay one."""
    f2p: dict[str, None] = {}
    p2p: dict[str, None] = {}
    for key in _TRANSITION_KEYS:
        tests = row.get(key) or {}
        if isinstance(tests, str):
            tests = json.loads(tests)
        if not isinstance(tests, dict):
            raise TaskError(
                f"Task.FAIL_TO_PASS: expected Multi-SWE-bench's {key} as {{test: {{run, test, fix}}}}; "
                f"found {type(tests).__name__}."
            )
        for test, status in tests.items():
            after, before = (status or {}).get("fix"), (status or {}).get("test")
            if after == "PASS":
                (p2p if before == "PASS" else f2p)[test] = None
    return list(f2p), [t for t in p2p if t not in f2p]


def from_swe_rebench_v2(row: dict[str, Any]) -> dict[str, Any]:
    """A SWE-rebench-V2 row: its own test command and parser (see the module docstring)."""
    config = row.get("install_config") or {}
    if isinstance(config, str):
        config = json.loads(config)
    parser = str(config.get("log_parser") or "")
    parser = _PYTEST_NAMES.get(parser, parser)
    problem = log_parsers.check_parser_name(parser)
    if problem:
        raise TaskError(
            f"Task.log_parser: expected a parser swebox has for install_config.log_parser; found {parser!r}. {problem}"
        )
    test_cmd = _commands(config.get("test_cmd"), "install_config.test_cmd")
    if not test_cmd:
        raise TaskError("Task.test_cmd: expected install_config.test_cmd; found none. The row cannot be graded.")
    lang = language(row, "language")
    used = {"install_config", "language", "FAIL_TO_PASS", "PASS_TO_PASS"}
    fields = {k: row[k] for k in TASK_FIELDS if k in row and k not in ("metadata", "env", "test_cmd", "language")}
    for key in ("hints_text", "version", "created_at", "environment_setup_commit"):
        fields[key] = "" if fields.get(key) is None else str(fields.get(key, ""))
    fields["FAIL_TO_PASS"] = [_ANSI.sub("", t).strip() for t in id_list(row, "FAIL_TO_PASS")]
    fields["PASS_TO_PASS"] = [_ANSI.sub("", t).strip() for t in id_list(row, "PASS_TO_PASS")]
    fields.update(grader="log", log_parser=parser, test_cmd="\n".join(test_cmd))
    fields["metadata"] = {
        **extra(row, used | set(fields)),
        "source": "swe-rebench-v2",
        "install_config": {k: v for k, v in config.items() if k != "install"},
    }
    install = tuple(_commands(config.get("install"), "install_config.install"))
    _start(fields, str(row.get("repo") or ""), _commit(row.get("base_commit"), "base_commit"), "", lang, install)
    return fields


def _commands(value: Any, key: str) -> list[str]:
    if value is None or value == "":
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    raise TaskError(f"Task.test_cmd: expected {key} as a command or a list of commands; found {value!r:.120}.")


def swesmith_language(row: dict[str, Any]) -> str:
    """A SWE-smith row's language: its ``language`` column, else its test ids' form (Go test names, Rust test
    paths); 'python' for pytest node ids."""
    if row.get("language"):
        return language(row, "language")
    ids = [*id_list(row, "FAIL_TO_PASS"), *id_list(row, "PASS_TO_PASS")]
    if ids and all(_GO_ID.match(t) for t in ids):
        return "go"
    if ids and all(_RUST_ID.match(t) for t in ids):
        return "rust"
    return "python"


def swesmith_native(fields: dict[str, Any], lang: str) -> dict[str, Any]:
    """Finish a SWE-smith row of Go or Rust (``fields`` already holds its bug, reversed patch, repo and
    commit): run as SWE-smith's profiles of that language do, graded from the log; starts with the bug in."""
    if lang not in SWESMITH_PARSER:
        raise TaskError(f"Task.language: swebox reads SWE-smith's Python, Go and Rust rows; found {lang!r}.")
    fields.update(grader="log", log_parser=SWESMITH_PARSER[lang], test_cmd=DEFAULT_TEST_CMD[lang])
    _start(fields, fields["repo"], fields["base_commit"], fields["bug_patch"], lang, ())
    fields["metadata"]["source"] = "swe-smith"
    return fields
