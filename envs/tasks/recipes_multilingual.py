"""Recipes of SWE-bench Multilingual rows (JavaScript/TypeScript, Go, Rust, Java): swebench's specs, or one's own.

SWE-bench Multilingual rows carry SWE-bench's keys; its harness takes everything else from the row's
repo/version: ``MAP_REPO_VERSION_TO_SPECS_{JS,GO,RUST,JAVA}`` (``install`` run when the instance image is made,
``build`` run in the eval script before the tests, ``test_cmd`` a string or a list, ``docker_specs`` naming
the image's ``node_version``/``go_version``/``rust_version``/``java_version``) and ``MAP_REPO_TO_PARSER`` (the
log parser, by repository key: :mod:`.graders.log_parsers` for JavaScript, :mod:`.graders.lang_parsers` for Go,
Rust and Java). In
swebox's terms: ``install`` builds the env layer (network), ``build`` becomes ``eval_commands``, the test
commands run one after another like the eval script's lines (``;``, not ``&&``: a failing first command must
not hide the second's results), and the parser is the repository's. Java's test commands run traced
(``set -x`` in a subshell), as every line of the harness's ``eval.sh`` (``set -uxo pipefail``) is: SWE-bench's
``parse_log_maven`` takes a test's name from the traced ``mvn ... -Dtest=Class#method`` line before the
``BUILD SUCCESS``/``BUILD FAILURE`` that Maven prints. The same keys in a ``$SWEBOX_SWE_SPECS``
entry with ``"language": "javascript"`` ('typescript', 'go', 'rust', 'java') and a ``"log_parser"`` ('tap',
'jest', 'go_test', 'cargo', 'maven', ... or a SWE-bench repository key) make a recipe of one's own, e.g. for a
repository swebench does not know.

The toolchain is a layer (:data:`TOOLCHAINS_OF_LANGUAGE`): Debian bookworm's node 18, Go 1.19, rustc 1.63 or
OpenJDK 17 with Maven 3.8.7 (and Debian's Maven plugins as a file repository: :mod:`swebox.envs.cache.toolchains`),
one version for every row. A spec's ``*_version`` is recorded in the task's metadata, not installed; rows
whose code needs a newer toolchain fail their env build or their tests (see docs/datasets.md).
"""

from __future__ import annotations

from typing import Any

from swebox.envs.tasks.schema import TaskError
from swebox.envs.tasks.synth.npm import NODE_TOOLCHAINS

LANGUAGE_OF_EXT = {"js": "javascript", "ts": "typescript", "go": "go", "rs": "rust", "java": "java"}
"""swebench's ``MAP_REPO_TO_EXT`` values -> Task.language."""
TOOLCHAINS_OF_LANGUAGE: dict[str, tuple[str, ...]] = {
    "javascript": NODE_TOOLCHAINS,
    "typescript": NODE_TOOLCHAINS,
    "go": ("go",),
    "rust": ("rust",),
    "java": ("jdk",),
}
"""Task.language -> the toolchain layers its env is built and tested on (``EnvSpec.toolchains``)."""
_TABLES = {
    "javascript": ("javascript", "JS"),
    "go": ("go", "GO"),
    "rust": ("rust", "RUST"),
    "java": ("java", "JAVA"),
}
"""Language -> (swebench's ``harness.constants`` module, its tables' suffix)."""
_PARSER_HINT = {
    "javascript": "'tap', 'jest', 'vitest'",
    "typescript": "'tap', 'jest', 'vitest'",
    "go": "'go_test'",
    "rust": "'cargo'",
    "java": "'maven', 'gradle', 'ant'",
}


def _commands(spec: dict, key: str) -> tuple[str, ...]:
    value = spec.get(key) or ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def is_multilingual_spec(spec: dict) -> bool:
    """A spec of one's own that names a JavaScript/TypeScript, Go, Rust or Java recipe."""
    return str(spec.get("language", "python")) in LANGUAGE_OF_EXT.values()


def multilingual_recipe(spec: dict, repo: str, default_parser: str = "") -> Any:
    """A :class:`swebox.envs.tasks.recipes.Recipe` of a non-Python spec (swebench's or one's own)."""
    from swebox.envs.tasks.recipes import Recipe  # recipes.py dispatches here: import at call time

    language = str(spec.get("language") or "javascript")
    tests = _commands(spec, "test_cmd")
    if not tests:
        raise TaskError(
            f"Task.version: expected a {language} spec of {repo} with a 'test_cmd'; found keys {sorted(spec)}."
        )
    parser = str(spec.get("log_parser") or default_parser)
    if not parser:
        raise TaskError(
            f"Task.repo: expected a log parser for {repo}: swebench has none; name one with "
            f"\"log_parser\" in its $SWEBOX_SWE_SPECS entry ({_PARSER_HINT[language]}, ...)."
        )
    test_cmd = " ; ".join(tests)
    if language == "java":  # traced, as eval.sh's lines are: parse_log_maven reads the -Dtest= of each command
        test_cmd = f"( set -x ; {test_cmd} )"
    versions = tuple((k, str(v)) for k, v in (spec.get("docker_specs") or {}).items() if k.endswith("_version"))
    return Recipe(
        python=str(spec.get("python", "3.11")),
        env_install=(*_commands(spec, "pre_install"), *_commands(spec, "install")),
        repo_commands=(),
        test_cmd=test_cmd,
        eval_commands=_commands(spec, "build"),
        language=language,
        log_parser=parser,
        toolchains=TOOLCHAINS_OF_LANGUAGE[language],
        tool_versions=versions,
    )


def swebench_multilingual_recipe(repo: str, version: str) -> Any:
    """The recipe swebench's JS, Go, Rust or Java tables give ``repo`` at ``version``; None when ``repo`` is in none."""
    from swebox.envs.tasks.graders import swebench_harness

    for language, (module, suffix) in _TABLES.items():
        try:
            table = getattr(
                swebench_harness.module(f"harness.constants.{module}"), f"MAP_REPO_VERSION_TO_SPECS_{suffix}"
            )
        except swebench_harness.HarnessUnavailable:
            return None
        if repo not in table:
            continue
        if version not in table[repo]:
            raise TaskError(
                f"Task.version: expected a version of {repo} with a recipe "
                f"({', '.join(sorted(table[repo]))}); found {version!r}."
            )
        ext = swebench_harness.module("harness.constants").MAP_REPO_TO_EXT.get(repo)
        language = LANGUAGE_OF_EXT.get(str(ext), language)
        return multilingual_recipe({**table[repo][version], "language": language}, repo, repo)
    return None


def custom_test_cmd(row: dict[str, Any]) -> str | None:
    """swebench's per-instance test commands for the repositories that compute them from the row
    (``MAP_REPO_TO_TEST_CMDS``: wp-calypso's, from its test patch); None for the others."""
    from swebox.envs.tasks.graders import swebench_harness

    custom = swebench_harness.module("harness.test_spec.javascript").MAP_REPO_TO_TEST_CMDS
    make = custom.get(str(row.get("repo", "")))
    return " ; ".join(make(row)) if make else None
