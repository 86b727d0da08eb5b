"""Harbor folders out: swebox tasks written as Harbor task folders (``swebox tasks export --format harbor``).

Per task, ``OUT/<instance_id>/``: ``task.toml`` (harbor 0.25's TaskConfig), ``instruction.md`` (the problem
statement), ``environment/Dockerfile``, ``tests/`` and ``solution/``:

- a Harbor task loaded by swebox is written back as it came (its own files);
- a row naming a container image (SWE-bench, SWE-Gym, ... ``metadata.image``/``image_name``/``docker_image``):
  ``FROM`` that image, ``WORKDIR /testbed``;
- a synthesised row (``env`` from PyPI): ``FROM python:<env.python>-slim`` plus RUN lines that unpack the sdist
  into /testbed, make /venv with the env's install commands, and commit the buggy state as one root commit
  (the bug is the reverse of the gold patch), as swebox's env and task layers hold them.

``tests/test.sh`` restores the task's test files to the start commit, applies ``test_patch``, runs the tests
with pytest's ``-rA`` summary and has ``tests/score.py`` (stdlib only) write ``/logs/verifier/reward.txt``:
1 when every FAIL_TO_PASS test PASSED and every PASS_TO_PASS test PASSED (or stayed XFAIL), else 0, as
swebox's and SWE-bench's pytest verdicts read. ``solution/solve.sh`` applies the gold patch.
Rows graded by a non-pytest log parser (Django's, SymPy's) are refused with one line each.
"""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path

from swebox.envs.tasks.schema import Task, TaskError

IMAGE_KEYS = ("image", "image_name", "docker_image")
START_TAG = "swebox-start"
SCORE_PY = '''\
"""Write /logs/verifier/reward.txt from a pytest -rA log: 1 when every FAIL_TO_PASS test PASSED and every
PASS_TO_PASS test PASSED or stayed XFAIL (swebox's and SWE-bench's pytest verdict), else 0."""
import json
import sys

STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
log_path, ids_path, reward_path = sys.argv[1:4]
with open(ids_path) as fh:
    ids = json.load(fh)
wanted = ids["FAIL_TO_PASS"] + ids["PASS_TO_PASS"]
found = {}
with open(log_path, errors="replace") as fh:
    for line in fh:
        line = line.rstrip("\\n")
        for status in STATUSES:
            if line.startswith(status + " "):
                rest = line[len(status) + 1:]
                for test in wanted:
                    if rest == test or rest.startswith(test + " - "):
                        found[test] = status
ok = all(found.get(t) == "PASSED" for t in ids["FAIL_TO_PASS"]) and all(
    found.get(t) in ("PASSED", "XFAIL") for t in ids["PASS_TO_PASS"])
for test in wanted:
    print("%-8s %s" % (found.get(test, "MISSING"), test))
with open(reward_path, "w") as fh:
    fh.write("1\\n" if ok else "0\\n")
'''


def _refuse(task: Task, expected: str, found: str, fix: str) -> TaskError:
    return TaskError(f"task {task.instance_id}: expected {expected}; found {found}. {fix}")


def image_of(task: Task) -> str:
    return next((str(task.metadata[k]) for k in IMAGE_KEYS if task.metadata.get(k)), "")


def _pytest_family(task: Task) -> bool:
    if task.grader == "junit" or task.log_parser == "pytest":
        return True
    from swebox.envs.tasks.graders import swebench_harness

    try:
        parser = swebench_harness.python_parsers().get(task.log_parser)
    except swebench_harness.HarnessUnavailable:
        return False
    return parser is not None and parser.__name__.startswith("parse_log_pytest")


def dockerfile(task: Task) -> str:
    """The environment's Dockerfile (see the module docstring)."""
    image = image_of(task)
    if image:
        return f"FROM {image}\nWORKDIR /testbed\n"
    env = task.env
    if env is None or not env.source.startswith("pypi:"):
        raise _refuse(
            task,
            "a row naming a container image or an env built from PyPI",
            repr(env.source if env else None),
            "Export rows of SWE-bench-family datasets or of "
            "`swebox tasks synth`; a local or git env has no source a Docker build can fetch.",
        )
    name, _, version = env.source[len("pypi:") :].partition("==")
    if task.bug_patch or task.hidden_tests:
        raise _refuse(
            task,
            "a synthesised row (bug = reverse of the gold patch)",
            "bug_patch/hidden_tests",
            "Rows with a separate bug patch or hidden tests are not exported yet.",
        )
    unpack = (
        "python -c \"import glob, shutil; shutil.unpack_archive(glob.glob('/tmp/sdist/*')[0], '/tmp/src')\""
        " && mv /tmp/src/* /testbed && rm -rf /tmp/sdist /tmp/src"
    )
    deps = [f"pip install {shlex.join(env.test_deps)}"] if env.test_deps else []
    install = " && ".join([". /venv/bin/activate", *env.install, *deps, *env.setup])
    bug = base64.b64encode(task.patch.encode()).decode()
    git = "git -c user.name=swebox -c user.email=swebox@localhost"
    return "\n".join(
        [
            f"FROM python:{env.python}-slim",
            "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*",
            f"RUN pip download --no-deps --no-binary {name} {shlex.quote(f'{name}=={version}')} -d /tmp/sdist "
            f"&& {unpack}",
            "WORKDIR /testbed",
            f"RUN python -m venv /venv && {install}",
            # the bug is the gold patch reversed; one root commit, so no history holds the fixed code
            f"RUN echo {bug} | base64 -d | git apply -R --whitespace=nowarn - && rm -rf .git && git init -q -b main "
            f"&& {git} add -A && {git} commit -q -m 'swebox start' && git tag {START_TAG}",
            "",
        ]
    )


def test_sh(task: Task) -> str:
    """tests/test.sh: restore the test files, apply test_patch, run the tests (-rA), score."""
    if not _pytest_family(task):
        raise _refuse(
            task,
            "a pytest-graded row (junit, or a pytest-family SWE-bench log parser)",
            f"log parser {task.log_parser!r}",
            "Only pytest -rA verdicts are exported to Harbor.",
        )
    start = (task.base_commit or "HEAD") if image_of(task) else START_TAG
    files = " ".join(shlex.quote(f) for f in task.all_test_files())
    if task.grader == "junit":
        python = shlex.quote(task.python)
        run = f"{task.test_cmd} -rA -p no:cacheprovider {files}"
    else:
        python = "python"
        run = "\n".join([*task.eval_commands, task.test_cmd])
    lines = [
        "#!/bin/bash",
        "# written by swebox tasks export --format harbor",
        "mkdir -p /logs/verifier && echo 0 > /logs/verifier/reward.txt",
        # SWE-bench images keep their env in conda (its eval scripts activate it the same way)
        "if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate && "
        "conda activate testbed; fi",
        "cd /testbed",
        f"for f in {files}; do git checkout -q {start} -- \"$f\" 2>/dev/null || rm -f -- \"$f\"; done" if files else "",
        "git apply --whitespace=nowarn /tests/test.patch || { echo 'test_patch does not apply'; exit 0; }"
        if task.test_patch
        else "",
        f"( {run} ) > /logs/verifier/tests.log 2>&1",
        f"{python} /tests/score.py /logs/verifier/tests.log /tests/ids.json /logs/verifier/reward.txt",
        "",
    ]
    return "\n".join(line for line in lines if line != "") + "\n"


def task_toml(task: Task) -> str:
    meta = {
        "swebox_instance_id": task.instance_id,
        "repo": task.repo,
        "base_commit": task.base_commit,
        "source": "swebox",
    }
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in meta.items() if v)
    return (
        f'schema_version = "1.1"\n\n[metadata]\n{body}\n\n[verifier]\ntimeout_sec = 1800.0\n'
        '# the tests read the agent\'s changes in its own container\nenvironment_mode = "shared"\n\n'
        "[agent]\ntimeout_sec = 3600.0\n\n[environment]\nbuild_timeout_sec = 1800.0\n"
    )


def _write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def export_task(task: Task, out: Path) -> Path:
    """Write one task as a Harbor folder ``out/<instance_id>``; TaskError (one line) when it cannot be."""
    folder = out / task.instance_id
    harbor = task.metadata.get("harbor")
    if task.grader == "harbor" and isinstance(harbor, dict):
        from swebox.envs.tasks.harbor_format.folders import unpack

        _write(folder / "task.toml", harbor["task_toml"])
        _write(folder / "instruction.md", task.problem_statement)
        for part in ("environment", "tests", "solution"):
            for rel, (data, mode) in unpack(harbor.get(part) or {}).items():
                _write(folder / part / rel, data, mode)
        return folder
    if not task.patch:
        raise _refuse(task, "a gold patch (solution/solve.sh applies it)", "none", "Export rows that have one.")
    files: dict[str, tuple[bytes | str, int]] = {
        "environment/Dockerfile": (dockerfile(task), 0o644),
        "tests/test.sh": (test_sh(task), 0o755),
        "tests/score.py": (SCORE_PY, 0o644),
        "tests/ids.json": (
            json.dumps({"FAIL_TO_PASS": list(task.FAIL_TO_PASS), "PASS_TO_PASS": list(task.PASS_TO_PASS)}, indent=1),
            0o644,
        ),
        "solution/fix.patch": (task.patch, 0o644),
        "solution/solve.sh": (
            "#!/bin/bash\nset -e\ncd /testbed\ngit apply --whitespace=nowarn /solution/fix.patch\n",
            0o755,
        ),
        "instruction.md": (task.problem_statement, 0o644),
        "task.toml": (task_toml(task), 0o644),
    }
    if task.test_patch:
        files["tests/test.patch"] = (task.test_patch, 0o644)
    for rel, (content, mode) in files.items():
        _write(folder / rel, content, mode)
    return folder


def export(tasks: list[Task], out: str | Path) -> tuple[list[Path], list[str]]:
    """Write every task it can; returns (folders written, one line per task refused)."""
    out = Path(out)
    written, refused = [], []
    for task in tasks:
        try:
            written.append(export_task(task, out))
        except TaskError as exc:
            refused.append(str(exc))
    return written, refused
