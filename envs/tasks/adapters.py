"""Turning rows of public SWE datasets into :class:`Task` records.

The datasets agree on little beyond SWE-bench's core keys:

- SWE-bench, SWE-Gym, SWE-bench-extra: SWE-bench's keys; ``FAIL_TO_PASS``/``PASS_TO_PASS`` are JSON strings
  in SWE-bench itself and lists in most copies.
- SWE-smith: ``instance_id, repo, patch, FAIL_TO_PASS, PASS_TO_PASS, image_name, problem_statement``; its
  ``patch`` is the BUG applied to a clean snapshot, and ``repo`` is ``swesmith/owner__name.commit8``.
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
from swebox.envs.tasks.diffs import reverse_diff
from swebox.envs.tasks.recipes import Recipe, recipe_from_spec, swebench_spec, swesmith_recipe, test_directives
from swebox.envs.tasks.schema import Task, TaskError
from swebox.envs.tasks.testids import file_of_test

TASK_FIELDS = tuple(f.name for f in dataclasses.fields(Task))
_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_SWESMITH_REPO = re.compile(
    r"^(?:swesmith/)?(?P<owner>[^/_]+(?:_[^/_]+)*?)__(?P<name>.+)\.(?P<commit>[0-9a-f]{7,40})$"
)
# Bulky columns that only cost memory once a task exists (R2E-Gym's prompt even contains the gold patch).
_DROP = frozenset(
    {
        "prompt",
        "parsed_commit_content",
        "execution_result_content",
        "text",
        "input_ids",
        "labels",
        "modified_entity_summaries",
    }
)


def _json_safe(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays from parquet readers
        value = value.tolist()
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _id_list(row: dict[str, Any], key: str) -> list[str]:
    value = row.get(key, [])
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise TaskError(
                f"Task.{key}: expected a list of test ids or a JSON string of one; found "
                f"{value[:120]!r}. Fix the row's {key}."
            ) from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TaskError(
            f"Task.{key}: expected a list of test ids; found {type(value).__name__}. Fix the row's {key}."
        )
    return list(value)


def _extra(row: dict[str, Any], used: set[str]) -> dict[str, Any]:
    meta = dict(row.get("metadata") or {}) if isinstance(row.get("metadata"), dict) else {}
    for key, value in row.items():
        if key not in used and key not in TASK_FIELDS and key not in _DROP:
            meta[key] = _json_safe(value)
    return meta


def _github_env(repo: str, commit: str, recipe: Recipe | None = None) -> EnvSpec | None:
    if not repo or not _HEX.match(commit):
        return None
    if recipe is None:
        return EnvSpec(source=f"git+https://github.com/{repo}.git", commit=commit)
    return EnvSpec(source=f"git+https://github.com/{repo}.git", commit=commit, python=recipe.python,
                   install=recipe.env_install, test_deps=())


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
    """'swebox' | 'swe-smith' | 'r2e-gym' | 'swe-bench' for one row."""
    if "expected_output_json" in row or "parsed_commit_content" in row:
        return "r2e-gym"
    if "image_name" in row and "test_patch" not in row:
        return "swe-smith"
    if set(row) <= set(TASK_FIELDS) and ("env" in row or "test_cmd" in row):
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
    fields["FAIL_TO_PASS"] = _id_list(row, "FAIL_TO_PASS")
    fields["PASS_TO_PASS"] = _id_list(row, "PASS_TO_PASS")
    for key in ("hints_text", "version", "created_at", "environment_setup_commit"):
        if key in fields and fields[key] is not None and not isinstance(fields[key], str):
            fields[key] = str(fields[key])
        elif key in fields and fields[key] is None:
            fields[key] = ""
    fields["metadata"] = _extra(row, set(fields))
    if "env" in fields:
        return fields
    Task.from_dict(fields)  # the row's own fields first: their errors name the field before a recipe's do
    repo, version = str(row.get("repo") or ""), str(fields.get("version") or "")
    if not repo:
        raise TaskError("Task.repo: expected 'owner/name' naming the GitHub repository; found ''.")
    base = _commit(row, "base_commit")
    setup = _commit(row, "environment_setup_commit") if row.get("environment_setup_commit") else base
    spec, reqs = swebench_spec(repo, version)
    recipe = recipe_from_spec(spec, reqs)
    _start_from(fields, _github_env(repo, setup, recipe), base, "", recipe.repo_commands)
    directives = test_directives(repo, str(row.get("test_patch") or ""))
    fields["test_cmd"] = " ".join([recipe.test_cmd, *directives])
    fields["grader"], fields["log_parser"] = "log", repo
    fields["eval_commands"] = list(recipe.eval_commands)
    if recipe.skipped:
        fields["metadata"]["recipe_skipped"] = list(recipe.skipped)
    return fields


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
        raise TaskError(f"Task.repo: expected SWE-smith's 'swesmith/OWNER__NAME.COMMIT'; found "
                        f"{str(row.get('repo', ''))[:80]!r}.")
    fields = {k: row[k] for k in TASK_FIELDS if k in row and k not in ("metadata", "env", "test_cmd")}
    fields["FAIL_TO_PASS"] = _id_list(row, "FAIL_TO_PASS")
    fields["PASS_TO_PASS"] = _id_list(row, "PASS_TO_PASS")
    fields["metadata"] = _extra(row, set(fields))
    fields["bug_patch"] = bug
    try:
        fields["patch"] = reverse_diff(bug)
    except ValueError as exc:
        raise TaskError(f"Task.patch: expected a reversible diff; found one that is not ({exc}).") from None
    fields["repo"] = f"{match['owner']}/{match['name']}"
    fields["base_commit"] = match["commit"]
    recipe = swesmith_recipe(match["owner"], match["name"], match["commit"])
    env = dataclasses.replace(_github_env(fields["repo"], match["commit"], recipe), test_deps=("pytest",))
    _start_from(fields, env, match["commit"], bug, ())  # pytest: the junit grader runs it
    files = [f for f in (file_of_test(t) for t in fields["FAIL_TO_PASS"]) if f]
    fields["test_files"] = list(dict.fromkeys(files))
    fields["hidden_tests"] = bool(files)
    fields["metadata"]["source"] = "swe-smith"
    return fields


def _render_r2e_diff(file_diff: dict[str, Any]) -> str:
    """R2E-Gym stores each file's diff as structured hunks; render it back to git's text."""
    path = file_diff["header"]["file"]["path"]
    out = [f"diff --git a/{path} b/{path}\n"]
    if file_diff["header"].get("misc_line"):
        out.append(file_diff["header"]["misc_line"] + "\n")
    index = file_diff.get("index_line")
    if index:
        mode = f" {index['mode']}" if index.get("mode") else ""
        out.append(f"index {index['old_commit_hash']}..{index['new_commit_hash']}{mode}\n")
    if file_diff.get("minus_file") and file_diff.get("plus_file"):
        out.append(f"--- {file_diff['minus_file']['path']}\n+++ {file_diff['plus_file']['path']}\n")
    marks = {"context": " ", "added": "+", "deleted": "-", "note": "\\ "}
    for hunk in file_diff.get("hunks", []):
        d = hunk["descriptor"]

        def rng(r: dict[str, Any]) -> str:
            return f"{r['start']}" if r.get("length") is None else f"{r['start']},{r['length']}"

        out.append(
            f"@@ -{rng(d['old_range'])} +{rng(d['new_range'])} @@"
            + (f" {d['section']}" if d.get("section") else "")
            + "\n"
        )
        out += [marks[line["type"]] + line["content"] + "\n" for line in hunk["line_group"]["all_lines"]]
    return "".join(out)


def _new_file_diff(path: str, code: str) -> str:
    lines = code.splitlines(keepends=True)
    body = "".join(
        "+" + (ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n") for ln in lines
    )
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def _loads(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(
                f"Task.{key}: expected a JSON string; found invalid JSON {value[:120]!r}."
            ) from None
    return value


def from_r2e(row: dict[str, Any]) -> dict[str, Any]:
    """R2E-Gym rows: the fix and the tests come as JSON; tests are bare names, so they match by suffix."""
    commit = _loads(row, "parsed_commit_content") or {}
    diffs = commit.get("file_diffs", []) if isinstance(commit, dict) else []
    fix = "".join(_render_r2e_diff(d) for d in diffs if not _is_test_path(d["header"]["file"]["path"]))
    expected = _loads(row, "expected_output_json") or {}
    if not isinstance(expected, dict):
        raise TaskError(
            f"Task.expected_output_json: expected a JSON object of test -> status; found "
            f"{type(expected).__name__}."
        )
    passing = [name for name, status in expected.items() if str(status).upper() in ("PASSED", "XFAIL")]
    execution = _loads(row, "execution_result_content") or {}
    codes = execution.get("test_file_codes") if isinstance(execution, dict) else None
    names = execution.get("test_file_names") if isinstance(execution, dict) else None
    if isinstance(codes, list) and isinstance(names, list):
        codes = dict(zip(names, codes, strict=False))
    test_patch = "".join(_new_file_diff(f"r2e_tests/{n}", c) for n, c in (codes or {}).items())
    repo = str(row.get("repo_name") or row.get("repo") or "")
    new_hash = str(row.get("commit_hash") or commit.get("new_commit_hash", ""))
    fields: dict[str, Any] = {
        "instance_id": str(row.get("instance_id") or f"{repo}__{new_hash}"),
        "repo": repo,
        "base_commit": str(commit.get("old_commit_hash", "")),
        "patch": fix,
        "test_patch": test_patch,
        "problem_statement": str(row.get("problem_statement") or ""),
        # Raw R2E-Gym rows do not say which tests failed before the fix: every test that passes after it
        # is required (resolved is unaffected; the 'fraction' reward counts them all).
        "FAIL_TO_PASS": _id_list(row, "FAIL_TO_PASS") or passing,
        "PASS_TO_PASS": _id_list(row, "PASS_TO_PASS"),
        "test_files": [f"r2e_tests/{n}" for n in (codes or {})],
        "hidden_tests": True,
    }
    fields["metadata"] = _extra(row, set(fields) | {"repo_name", "commit_hash", "expected_output_json"})
    fields["metadata"].update(source="r2e-gym", expected_output=expected)
    return fields


def _is_test_path(path: str) -> bool:
    parts = path.split("/")
    return any(p in ("test", "tests", "testing") for p in parts[:-1]) or parts[-1].startswith("test_")


ADAPTERS = {
    "swe-bench": from_swebench,
    "swe-smith": from_swesmith,
    "r2e-gym": from_r2e,
    "swebox": lambda row: dict(row),
}


def to_task(row: dict[str, Any]) -> Task:
    """One dataset row -> a validated Task (raises TaskError naming the field)."""
    if not isinstance(row, dict):
        raise TaskError(f"Task: expected a JSON object per row; found {type(row).__name__}.")
    return Task.from_dict(ADAPTERS[detect(row)](row))
