"""Log parsers for Go, Rust, Java and C/C++ test logs, by the names the multilingual datasets give them.

Three naming schemes reach ``Task.log_parser`` for these languages, and all of them resolve here:

- SWE-bench Multilingual's repository keys (``MAP_REPO_TO_PARSER`` of swebench's ``harness.log_parsers``:
  'gin-gonic/gin', 'tokio-rs/tokio', 'jqlang/jq', ...), each that repository's parser;
- SWE-bench's parser function names, which SWE-rebench-V2 rows name in ``install_config.log_parser``
  ('parse_log_gotest', 'parse_log_cargo', 'parse_log_googletest', ...; SWE-rebench-V2's table maps these
  names to functions of the same rules as swebench's);
- generic names for datasets that name none: 'go_test' (``go test -v``), 'cargo' (``cargo test``),
  'googletest', and Multi-SWE-bench's rules (Go, Rust, and Java's Maven and Gradle ones), whose harness
  keeps a parser per repository class rather than a name.

The swebench ones are swebench's own functions (:mod:`.swebench_harness`), so a status map is the official
harness's. A parser takes the log text and returns {test id: SWE-bench status}.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from swebox.envs.tasks.graders import java_parsers, swebench_harness

Parser = Callable[[str], dict[str, str]]

GO_TEST = "go_test"
"""``go test -v`` logs read by SWE-bench's ``parse_log_gotest`` (``--- PASS: TestX (0.00s)`` lines)."""
CARGO = "cargo"
"""``cargo test`` logs read by SWE-bench's ``parse_log_cargo`` (``test path::name ... ok`` lines)."""
GOOGLETEST = "googletest"
"""GoogleTest binaries' logs read by SWE-bench's ``parse_log_googletest`` (``[       OK ] Suite.Name (0 ms)``)."""
MAVEN = "maven"
"""``mvn test -Dtest=Class#method`` runs, one per test, traced (``set -x``), read by SWE-bench's
``parse_log_maven``: a test's status is the ``BUILD SUCCESS``/``BUILD FAILURE`` after the last ``-Dtest=`` line
(Maven prints no line per passing test)."""
GRADLE = "gradle"
"""``gradle test`` logs with every test's result printed (``Class > method PASSED``), read by SWE-bench's
``parse_log_gradle_custom`` (its Gradle rows' ``pre_install`` turns that logging on)."""
ANT = "ant"
"""Ant ``<junit>`` logs of lombok's formatter (``[junit] [PASS] name``), read by SWE-bench's ``parse_log_ant``."""
MSB_GO = "multi_swe_bench_go"
"""Multi-SWE-bench's Go rule (:func:`parse_multi_swe_bench_go`)."""
MSB_RUST = "multi_swe_bench_rust"
"""Multi-SWE-bench's Rust rule (:func:`parse_multi_swe_bench_rust`)."""
MSB_MAVEN = "multi_swe_bench_maven"
"""Multi-SWE-bench's Maven rule (:func:`.java_parsers.parse_multi_swe_bench_maven`): surefire's class lines."""
MSB_GRADLE = "multi_swe_bench_gradle"
"""Multi-SWE-bench's Gradle rule (:func:`.java_parsers.parse_multi_swe_bench_gradle`): ``Class > method``."""

# swebench module -> (language, its repo map's name, the functions it defines that rows may name)
_MODULES = {
    "go": ("go", "MAP_REPO_TO_PARSER_GO", ("parse_log_gotest",)),
    "rust": ("rust", "MAP_REPO_TO_PARSER_RUST", ("parse_log_cargo",)),
    "java": (
        "java",
        "MAP_REPO_TO_PARSER_JAVA",
        ("parse_log_maven", "parse_log_gradle_custom", "parse_log_ant"),
    ),
    "c": (
        "c",
        "MAP_REPO_TO_PARSER_C",
        ("parse_log_redis", "parse_log_jq", "parse_log_doctest", "parse_log_micropython_test", "parse_log_googletest"),
    ),
}
_ALIASES = {
    GO_TEST: ("go", "parse_log_gotest"),
    CARGO: ("rust", "parse_log_cargo"),
    GOOGLETEST: ("c", "parse_log_googletest"),
    MAVEN: ("java", "parse_log_maven"),
    GRADLE: ("java", "parse_log_gradle_custom"),
    ANT: ("java", "parse_log_ant"),
}
_CPP_REPOS = frozenset({"nlohmann/json", "fmtlib/fmt"})
"""SWE-bench keeps C and C++ in one module; these of its C map are C++ projects."""

_GO_RESULT = re.compile(r"^--- (PASS|FAIL|SKIP): (\S+)")
_GO_PACKAGE = re.compile(r"^(ok|FAIL)\s+(\S+)\s")
_RUST_RESULT = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)\b")
_STATUS = {
    "PASS": "PASSED",
    "ok": "PASSED",
    "FAIL": "FAILED",
    "FAILED": "FAILED",
    "SKIP": "SKIPPED",
    "ignored": "SKIPPED",
}


def parse_multi_swe_bench_go(log: str) -> dict[str, str]:
    """Multi-SWE-bench's reading of ``go test -v -count=1 ./...`` (its Go repositories' ``parse_log``).

    A test's result line (``--- PASS: TestX/sub``, the duration optional) and a package's summary line
    (``ok  <pkg> 0.1s`` / ``FAIL <pkg> 0.1s``: Multi-SWE-bench records packages as tests too) give a status;
    a failure is kept over any pass of the same name, as its result sets do (a name in its failed set fails).
    """
    found: dict[str, str] = {}
    for raw in log.split("\n"):
        line = raw.strip()
        match = _GO_RESULT.match(line) or _GO_PACKAGE.match(line + " ")
        if match and found.get(match[2]) != "FAILED":
            found[match[2]] = _STATUS[match[1]]
    return found


def parse_multi_swe_bench_rust(log: str) -> dict[str, str]:
    """Multi-SWE-bench's reading of ``cargo test`` (``test <path> ... ok|FAILED|ignored``); a failure is kept
    over a pass of the same name (one test path can run in several test binaries)."""
    found: dict[str, str] = {}
    for raw in log.split("\n"):
        match = _RUST_RESULT.match(raw.strip())
        if match and found.get(match[1]) != "FAILED":
            found[match[1]] = _STATUS[match[2]]
    return found


_OWN: dict[str, tuple[str, Parser]] = {
    MSB_GO: ("go", parse_multi_swe_bench_go),
    MSB_RUST: ("rust", parse_multi_swe_bench_rust),
    MSB_MAVEN: ("java", java_parsers.parse_multi_swe_bench_maven),
    MSB_GRADLE: ("java", java_parsers.parse_multi_swe_bench_gradle),
    **{name: ("java", fn) for name, fn in java_parsers.REBENCH.items()},
}


@functools.cache
def _swebench_parsers() -> dict[str, tuple[str, Parser]]:
    """name -> (language, parser) for every swebench-backed name (needs swebench; raises HarnessUnavailable)."""
    out: dict[str, tuple[str, Parser]] = {}
    functions: dict[str, tuple[str, Callable]] = {}
    for module_name, (language, map_name, names) in _MODULES.items():
        module = swebench_harness.module(f"harness.log_parsers.{module_name}")
        for name in names:
            functions[name] = (language, getattr(module, name))
        for repo, fn in getattr(module, map_name).items():
            lang = "cpp" if repo in _CPP_REPOS else language
            out[repo] = (lang, _bind(fn))
    for name, (language, fn) in functions.items():
        out[name] = (language, _bind(fn))
    for alias, (_, name) in _ALIASES.items():
        out[alias] = out[name]
    return out


def _bind(fn: Callable) -> Parser:
    # swebench's parsers take a TestSpec only to share a signature; none of these reads it
    return lambda log: fn(log, None)


def parsers() -> dict[str, tuple[str, Parser]]:
    """Every name this module resolves -> (language, parser); needs swebench (HarnessUnavailable without)."""
    return {**_swebench_parsers(), **_OWN}


def parser(name: str) -> Parser | None:
    """The parser of ``name``; None when this module has no such name. swebox's own rules need no swebench;
    the others raise HarnessUnavailable without it."""
    if name in _OWN:
        return _OWN[name][1]
    found = parsers().get(name)
    return found[1] if found else None


def offline_names() -> frozenset[str]:
    """The names known without swebench installed (the generic ones and swebox's own rules)."""
    return frozenset({*_ALIASES, *_OWN, *(n for _, _, names in _MODULES.values() for n in names)})


def language_of(name: str) -> str:
    """'go' | 'rust' | 'java' | 'c' | 'cpp' for a parser name of this module; '' for any other name."""
    if name in _OWN:
        return _OWN[name][0]
    if name in _ALIASES:
        return _ALIASES[name][0]
    try:
        return parsers().get(name, ("", None))[0]
    except swebench_harness.HarnessUnavailable:
        return next((lang for lang, _, names in _MODULES.values() if name in names), "")
