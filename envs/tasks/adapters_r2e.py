"""R2E-Gym rows -> Task fields.

Columns (the dataset card of R2E-Gym-Subset and R2E-Gym's code): ``repo_name`` (a short name such as
'pandas'), ``docker_image``, ``commit_hash`` (the fix commit), ``parsed_commit_content`` (JSON: the commit
with ``old_commit_hash`` and structured ``file_diffs``), ``execution_result_content`` (JSON with the hidden
test files' code), ``expected_output_json`` (JSON: bare test name -> PASSED/FAILED after the fix),
``problem_statement``, ``prompt`` (which holds the gold patch, so it is dropped).
"""

from __future__ import annotations

from typing import Any

from swebox.envs.cache.spec import EnvSpec
from swebox.envs.tasks.graders.diff_parse import diff_lines
from swebox.envs.tasks.recipes import system_metadata, user_recipe
from swebox.envs.tasks.rows import extra, id_list, loads
from swebox.envs.tasks.schema import TaskError

R2E_REPOS = {
    "aiohttp": "aio-libs/aiohttp",
    "coveragepy": "nedbat/coveragepy",
    "datalad": "datalad/datalad",
    "numpy": "numpy/numpy",
    "orange3": "biolab/orange3",
    "pandas": "pandas-dev/pandas",
    "pillow": "python-pillow/Pillow",
    "pyramid": "Pylons/pyramid",
    "scrapy": "scrapy/scrapy",
    "tornado": "tornadoweb/tornado",
}
"""R2E-Gym's short repo names -> their GitHub repositories (the owners of its instance ids)."""


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
    lines = diff_lines(code)  # git's lines: str.splitlines would also break at a form feed
    body = "".join("+" + (ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n") for ln in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def from_r2e(row: dict[str, Any]) -> dict[str, Any]:
    """R2E-Gym rows: the fix and the tests come as JSON; tests are bare names, so they match by suffix."""
    commit = loads(row, "parsed_commit_content") or {}
    diffs = commit.get("file_diffs", []) if isinstance(commit, dict) else []
    fix = "".join(_render_r2e_diff(d) for d in diffs if not _is_test_path(d["header"]["file"]["path"]))
    expected = loads(row, "expected_output_json") or {}
    if not isinstance(expected, dict):
        raise TaskError(
            f"Task.expected_output_json: expected a JSON object of test -> status; found {type(expected).__name__}."
        )
    passing = [name for name, status in expected.items() if str(status).upper() in ("PASSED", "XFAIL")]
    execution = loads(row, "execution_result_content") or {}
    codes = execution.get("test_file_codes") if isinstance(execution, dict) else None
    names = execution.get("test_file_names") if isinstance(execution, dict) else None
    if isinstance(codes, list) and isinstance(names, list):
        codes = dict(zip(names, codes, strict=False))
    test_patch = "".join(_new_file_diff(f"r2e_tests/{n}", c) for n, c in (codes or {}).items())
    repo = str(row.get("repo_name") or row.get("repo") or "")
    new_hash = str(row.get("commit_hash") or commit.get("new_commit_hash", ""))
    fields: dict[str, Any] = {
        # a repo_name given as OWNER/NAME (accepted below) must not put a '/' into the id
        "instance_id": str(row.get("instance_id") or f"{repo.replace('/', '__')}__{new_hash}"),
        "repo": repo,
        "base_commit": str(commit.get("old_commit_hash", "")),
        "patch": fix,
        "test_patch": test_patch,
        "problem_statement": str(row.get("problem_statement") or ""),
        # Raw R2E-Gym rows do not say which tests failed before the fix: every test that passes after it
        # is required (resolved is unaffected; the 'fraction' reward counts them all).
        "FAIL_TO_PASS": id_list(row, "FAIL_TO_PASS") or passing,
        "PASS_TO_PASS": id_list(row, "PASS_TO_PASS"),
        "test_files": [f"r2e_tests/{n}" for n in (codes or {})],
        "hidden_tests": True,
    }
    fields["metadata"] = extra(row, set(fields) | {"repo_name", "commit_hash", "expected_output_json"})
    fields["metadata"]["source"] = "r2e-gym"
    # R2E-Gym's reward: every test of expected_output_json ends with its status, FAILED ones included
    fields["expected_status"] = {name: str(status).upper() for name, status in expected.items()}
    github = R2E_REPOS.get(repo.lower(), repo if "/" in repo else "")
    if github:
        fields["repo"] = github
    recipe = user_recipe(github, "r2e") if github else None
    old = fields["base_commit"]
    if recipe is not None and old:
        # the env is the repository at the old commit itself: the task starts there, no checkout layer;
        # R2E-Gym's images install the project once, so the install is env work too
        fields["env"] = EnvSpec(
            source=f"git+https://github.com/{github}.git",
            commit=old,
            python=recipe.python,
            install=recipe.env_install + recipe.repo_commands,
            test_deps=("pytest",),
        )
        fields["metadata"].update(system_metadata(recipe))
    # without a recipe the task has no env: `swebox cache build` names it (R2E-Gym publishes images only;
    # give a recipe under "OWNER/NAME": {"r2e": {...}} in $SWEBOX_SWE_SPECS, docs/datasets.md)
    return fields


def _is_test_path(path: str) -> bool:
    parts = path.split("/")
    return any(p in ("test", "tests", "testing") for p in parts[:-1]) or parts[-1].startswith("test_")
