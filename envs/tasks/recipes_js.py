"""Recipes of JavaScript/TypeScript rows (SWE-bench Multilingual's format): swebench's JS specs, or one's own.

SWE-bench Multilingual rows carry SWE-bench's keys; its harness takes everything else from the row's
repo/version: ``MAP_REPO_VERSION_TO_SPECS_JS`` (``install`` run when the instance image is made, ``build``
run in the eval script before the tests, ``test_cmd`` a string or a list, ``docker_specs.node_version``)
and ``MAP_REPO_TO_PARSER_JS`` (the log parser). In swebox's terms: ``install`` builds the env layer
(network), ``build`` becomes ``eval_commands``, the test commands run one after another like the eval
script's lines (``;``, not ``&&``: a failing first command must not hide the second's results), and the
parser is the repository's. The same keys in a ``$SWEBOX_SWE_SPECS`` entry with ``"language":
"javascript"`` (and a ``"log_parser"``: 'tap', 'jest', ... or a SWE-bench repository key) make a recipe of
one's own, e.g. for a repository swebench does not know.

Node itself is the host's (through the sandbox's /usr), one version for every row: a spec's
``node_version`` is recorded in the task's metadata, not installed (see docs/datasets.md).
"""

from __future__ import annotations

from typing import Any

from swebox.envs.tasks.schema import TaskError

LANGUAGE_OF_EXT = {"js": "javascript", "ts": "typescript"}
"""swebench's ``MAP_REPO_TO_EXT`` values -> Task.language."""


def _commands(spec: dict, key: str) -> tuple[str, ...]:
    value = spec.get(key) or ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def is_javascript_spec(spec: dict) -> bool:
    """A spec of one's own that names a JavaScript/TypeScript recipe."""
    return str(spec.get("language", "python")) in LANGUAGE_OF_EXT.values()


def javascript_recipe(spec: dict, repo: str, default_parser: str = "") -> Any:
    """A :class:`swebox.envs.tasks.recipes.Recipe` of a JavaScript spec (swebench's or one's own)."""
    from swebox.envs.tasks.recipes import Recipe  # recipes.py dispatches here: import at call time

    tests = _commands(spec, "test_cmd")
    if not tests:
        raise TaskError(f"Task.version: expected a JavaScript spec of {repo} with a 'test_cmd'; found keys "
                        f"{sorted(spec)}.")
    parser = str(spec.get("log_parser") or default_parser)
    if not parser:
        raise TaskError(f"Task.repo: expected a log parser for {repo}: swebench has none; name one with "
                        "\"log_parser\" in its $SWEBOX_SWE_SPECS entry ('tap', 'jest', 'vitest', ...).")
    language = str(spec.get("language") or "javascript")
    node = str((spec.get("docker_specs") or {}).get("node_version", ""))
    return Recipe(python=str(spec.get("python", "3.11")), env_install=(*_commands(spec, "pre_install"),
                  *_commands(spec, "install")), repo_commands=(), test_cmd=" ; ".join(tests),
                  eval_commands=_commands(spec, "build"), language=language, log_parser=parser, node_version=node)


def swebench_javascript_recipe(repo: str, version: str) -> Any:
    """The recipe swebench's JS tables give ``repo`` at ``version``; None when ``repo`` is not in them."""
    from swebox.envs.tasks.graders import swebench_harness

    try:
        table = swebench_harness.javascript_specs()
    except swebench_harness.HarnessUnavailable:
        return None
    if repo not in table:
        return None
    if version not in table[repo]:
        raise TaskError(f"Task.version: expected a version of {repo} with a recipe ({', '.join(sorted(table[repo]))}); "
                        f"found {version!r}.")
    language = LANGUAGE_OF_EXT.get(str(swebench_harness.module("harness.constants").MAP_REPO_TO_EXT.get(repo)),
                                   "javascript")
    return javascript_recipe({**table[repo][version], "language": language}, repo, repo)


def custom_test_cmd(row: dict[str, Any]) -> str | None:
    """swebench's per-instance test commands for the repositories that compute them from the row
    (``MAP_REPO_TO_TEST_CMDS``: wp-calypso's, from its test patch); None for the others."""
    from swebox.envs.tasks.graders import swebench_harness

    custom = swebench_harness.module("harness.test_spec.javascript").MAP_REPO_TO_TEST_CMDS
    make = custom.get(str(row.get("repo", "")))
    return " ; ".join(make(row)) if make else None
