"""Turning rows of public SWE datasets into :class:`Task` records.

The datasets agree on little beyond SWE-bench's core keys:

- SWE-bench, SWE-Gym, SWE-bench-extra: SWE-bench's keys; ``FAIL_TO_PASS``/``PASS_TO_PASS`` are JSON strings
  in SWE-bench itself and lists in most copies.
- SWE-smith: ``instance_id, repo, patch, FAIL_TO_PASS, PASS_TO_PASS, image_name, problem_statement``; its
  ``patch`` is the BUG applied to a clean snapshot, and ``repo`` is ``swesmith/owner__name.commit8``.
- Multi-SWE-bench, SWE-rebench-V2 and SWE-smith's Go and Rust rows: :mod:`.adapters_multi`.
- R2E-Gym: ``repo_name, docker_image, commit_hash, parsed_commit_content`` (a JSON commit with structured
  file diffs), ``execution_result_content`` (JSON with the test files' code), ``expected_output_json`` (JSON
  map of bare test names to PASSED/FAILED after the fix), ``problem_statement``.

Every adapter returns a dict of Task fields; keys a dataset has beyond those go to ``metadata``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from swebox.envs.cache.checkout import CheckoutSpec
from swebox.envs.cache.spec import EnvSpec
from swebox.envs.tasks import adapters_multi
from swebox.envs.tasks.adapters_r2e import from_r2e
from swebox.envs.tasks.graders.diff_reverse import reverse_diff
from swebox.envs.tasks.recipes import Recipe, swebench_recipe, system_metadata
from swebox.envs.tasks.recipes_multilingual import custom_test_cmd
from swebox.envs.tasks.recipes_swesmith import swesmith_recipe
from swebox.envs.tasks.rows import TASK_FIELDS, extra, id_list
from swebox.envs.tasks.schema import LIST_FIELDS, Task, TaskError
from swebox.envs.tasks.testids import file_of_test

_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_SWESMITH_REPO = re.compile(r"^(?:swesmith/)?(?P<owner>[^/_]+(?:_[^/_]+)*?)__(?P<name>.+)\.(?P<commit>[0-9a-f]{7,40})$")


def _github_env(repo: str, commit: str, recipe: Recipe) -> EnvSpec:
    return EnvSpec(
        source=f"git+https://github.com/{repo}.git",
        commit=commit,
        python=recipe.python,
        install=recipe.env_install,
        test_deps=(),
        toolchains=recipe.toolchains,
    )


def _commit(row: dict[str, Any], key: str) -> str:
    value = str(row.get(key) or "")
    if not _HEX.match(value):
        raise TaskError(f"Task.{key}: expected a hex git commit id; found {value[:60]!r}. Fix the row's {key}.")
    return value


def _start_from(fields: dict[str, Any], env: EnvSpec, commit: str, patch: str, commands: tuple[str, ...]) -> None:
    """The task starts from ``commit`` (+ ``patch``) of the env's repository, through a checkout layer."""
    checkout = CheckoutSpec(env=env, commit=commit, patch=patch, commands=commands)
    fields["env"] = env
    fields["task_layer_key"] = checkout.key()
    fields["metadata"]["checkout"] = {"commit": commit, "commands": list(commands)}


def detect(row: dict[str, Any]) -> str:
    """'swebox' | 'swe-smith' | 'r2e-gym' | 'multi-swe-bench' | 'swe-rebench-v2' | 'swe-bench' for one row."""
    if "expected_output_json" in row or "parsed_commit_content" in row:
        return "r2e-gym"
    if "fix_patch" in row and "org" in row:
        return "multi-swe-bench"
    if "install_config" in row:
        return "swe-rebench-v2"
    if "image_name" in row and "test_patch" not in row:
        return "swe-smith"
    # every SWE-bench-format row names its base_commit; swebox's own rows may leave out env until built
    if set(row) <= set(TASK_FIELDS) and ("env" in row or "test_cmd" in row or "base_commit" not in row):
        return "swebox"
    return "swe-bench"


def from_swebench(row: dict[str, Any]) -> dict[str, Any]:
    """SWE-bench / SWE-Gym rows (lists possibly stored as JSON strings).

    The environment is built at ``environment_setup_commit`` with the recipe of the row's repo/version
    (:mod:`.recipes`); the task starts at ``base_commit`` through a checkout layer that also runs the
    recipe's pre_install/install there; tests run with the recipe's test command plus the test files of
    ``test_patch``, graded from the log by the repo's parser (SWE-bench's harness does the same).
    Rows that carry swebox's own ``env`` keep it and are graded by the junit grader.
    """
    fields = {k: row[k] for k in TASK_FIELDS if k in row and k != "metadata"}
    fields["FAIL_TO_PASS"] = id_list(row, "FAIL_TO_PASS")
    fields["PASS_TO_PASS"] = id_list(row, "PASS_TO_PASS")
    for key in ("hints_text", "version", "created_at", "environment_setup_commit"):
        if key in fields and fields[key] is not None and not isinstance(fields[key], str):
            fields[key] = str(fields[key])
        elif key in fields and fields[key] is None:
            fields[key] = ""
    fields["metadata"] = extra(row, set(fields))
    if "env" in fields:
        return fields
    Task.from_dict(fields)  # the row's own fields first: their errors name the field before a recipe's do
    repo, version = str(row.get("repo") or ""), str(fields.get("version") or "")
    if not repo:
        raise TaskError("Task.repo: expected 'owner/name' naming the GitHub repository; found ''.")
    base = _commit(row, "base_commit")
    setup = _commit(row, "environment_setup_commit") if row.get("environment_setup_commit") else base
    recipe = swebench_recipe(repo, version)
    _start_from(fields, _github_env(repo, setup, recipe), base, "", recipe.repo_commands)
    if recipe.grader == "junit":  # a recipe of one's own for a pytest suite: swebox's runner reads JUnit
        fields["test_cmd"] = f"/venv/bin/python -m {recipe.test_cmd}"
    elif recipe.language != "python":  # SWE-bench Multilingual: the spec's commands as they are, no directives
        fields["test_cmd"] = custom_test_cmd(row) or recipe.test_cmd
        fields["grader"], fields["log_parser"] = "log", recipe.log_parser or log_parser_for(repo)
        fields["language"], fields["eval_commands"] = recipe.language, list(recipe.eval_commands)
        fields["metadata"].update(dict(recipe.tool_versions))
    else:
        directives = _directives(repo, str(row.get("test_patch") or ""))
        fields["test_cmd"] = " ".join([recipe.test_cmd, *directives])
        fields["grader"], fields["log_parser"] = "log", log_parser_for(repo)
        fields["eval_commands"] = list(recipe.eval_commands)
    fields["metadata"].update(system_metadata(recipe))
    return fields


def _directives(repo: str, test_patch: str) -> list[str]:
    """SWE-bench's own test selection (its ``get_test_directives``, through :mod:`.log_parsers`): the one
    rule for every log-graded row, read from swebench rather than re-implemented."""
    from swebox.envs.tasks.graders import log_parsers, swebench_harness

    try:
        return log_parsers.test_directives(repo, test_patch)
    except swebench_harness.HarnessUnavailable as exc:
        raise TaskError(
            f"Task.test_patch: choosing the tests to run the way SWE-bench does needs its harness; {exc}"
        ) from None


def log_parser_for(repo: str) -> str:
    """SWE-bench's parser of ``repo`` when it has one, else its plain pytest parser (SWE-Gym's and
    SWE-bench-extra's repositories, which run pytest, as their harnesses parse them)."""
    from swebox.envs.tasks.graders import log_parsers, swebench_harness

    try:
        return repo if repo in log_parsers.parser_names() else log_parsers.PYTEST
    except swebench_harness.HarnessUnavailable:  # no swebench: the name's form is all that can be checked now
        return repo


def from_swesmith(row: dict[str, Any]) -> dict[str, Any]:
    """SWE-smith rows: the stored patch is the bug, so the task's patch is its reverse.

    The env is built at the snapshot commit of ``repo`` (``swesmith/OWNER__NAME.COMMIT``) with its swesmith
    profile; the task starts there with the bug applied (checkout layer) and, as SWE-smith's instance
    branches do, without the FAIL_TO_PASS test files (``hidden_tests``: removed from the agent's start,
    present for grading, protected from the agent's diff). Graded by pytest's JUnit (node ids).
    """
    bug = str(row.get("patch") or "")
    if not bug.strip():
        raise TaskError("Task.patch: expected SWE-smith's bug diff; found ''. The row has no bug to fix.")
    match = _SWESMITH_REPO.match(str(row.get("repo", "")))
    if not match:
        raise TaskError(
            f"Task.repo: expected SWE-smith's 'swesmith/OWNER__NAME.COMMIT'; found {str(row.get('repo', ''))[:80]!r}."
        )
    fields = {k: row[k] for k in TASK_FIELDS if k in row and k not in ("metadata", "env", "test_cmd")}
    fields["FAIL_TO_PASS"] = id_list(row, "FAIL_TO_PASS")
    fields["PASS_TO_PASS"] = id_list(row, "PASS_TO_PASS")
    fields["metadata"] = extra(row, set(fields))
    fields["bug_patch"] = bug
    try:
        fields["patch"] = reverse_diff(bug)
    except ValueError as exc:
        raise TaskError(f"Task.patch: expected a reversible diff; found one that is not ({exc}).") from None
    fields["repo"] = f"{match['owner']}/{match['name']}"
    fields["base_commit"] = match["commit"]
    lang = adapters_multi.swesmith_language(row)
    if lang != "python":
        return adapters_multi.swesmith_native(fields, lang)
    recipe = swesmith_recipe(match["owner"], match["name"], match["commit"])
    fields["metadata"].update(system_metadata(recipe))
    env = dataclasses.replace(_github_env(fields["repo"], match["commit"], recipe), test_deps=("pytest",))
    _start_from(fields, env, match["commit"], bug, ())  # pytest: the junit grader runs it
    files = [f for f in (file_of_test(t) for t in fields["FAIL_TO_PASS"]) if f]
    fields["test_files"] = list(dict.fromkeys(files))
    fields["hidden_tests"] = bool(files)
    fields["metadata"]["source"] = "swe-smith"
    return fields


def from_swebox(row: dict[str, Any]) -> dict[str, Any]:
    """swebox's own rows. A list field stored as a JSON string of a list (as SWE-bench's files store
    FAIL_TO_PASS/PASS_TO_PASS, and as a parquet written from such rows holds them) is decoded, not refused; a
    string that is not one is left for the schema's error."""
    fields = dict(row)
    for key in LIST_FIELDS:
        value = fields.get(key)
        if isinstance(value, str) and value.strip().startswith("["):
            try:
                decoded = json.loads(value)
            except json.JSONDecodeError:
                raise TaskError(
                    f"Task.{key}: expected a list of strings or a JSON string of one; found a string "
                    f"that is not valid JSON {value[:120]!r}. Fix the row's {key}."
                ) from None
            if isinstance(decoded, list):
                fields[key] = decoded
        elif value is not None and hasattr(value, "tolist"):  # a parquet/numpy array column
            fields[key] = value.tolist()
    return fields


ADAPTERS = {
    "swe-bench": from_swebench,
    "swe-smith": from_swesmith,
    "r2e-gym": from_r2e,
    "multi-swe-bench": adapters_multi.from_multi_swe_bench,
    "swe-rebench-v2": adapters_multi.from_swe_rebench_v2,
    "swebox": from_swebox,
}


def to_task(row: dict[str, Any]) -> Task:
    """One dataset row -> a validated Task (raises TaskError naming the field)."""
    if not isinstance(row, dict):
        raise TaskError(f"Task: expected a JSON object per row; found {type(row).__name__}.")
    return Task.from_dict(ADAPTERS[detect(row)](row))
