"""swebox under the real Harbor (harbor 0.25.0 on Python 3.12, its own venv: tests/harbor_venv.py).

- ``harbor run`` with ``--env swebox.envs.frameworks.harbor_env:SweboxEnvironment`` on local task folders (two
  written as
  Harbor tasks, one exported by ``swebox tasks export --format harbor`` from a SWE-bench-style image row):
  Harbor's oracle agent scores 1.0 on each, its nop agent 0.0, every trial without an exception;
- the provider through Harbor's own factory and task classes: exec (stdout/stderr/exit code, cwd, env, a fresh
  shell per call, timeout), upload/download of files and folders, is_dir/is_file, a non-root user refused;
- ``harbor lint`` and Harbor's ``Task`` accept exported folders (a synthesised PyPI row and an image row).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import import_image, oci_layout
from swebox.envs.tasks.harbor_format.export import export
from swebox.envs.tasks.schema import Task

from tests.calc import calc_task
from tests.envs.cache.py39_image import GOLD, VENV_PYTHON, py39_layout
from tests.harbor_fixture import write_task
from tests.harbor_venv import REPO, harbor_venv, python312, run_in

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not python312(),
        reason="needs a Python 3.12 interpreter (harbor 0.25 requires >= 3.12): "
        "pyenv's /root/.pyenv/versions/3.12.1, python3.12 on PATH, or $SWEBOX_PY312",
    ),
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("mmdebstrap", "tar2sqfs")),
        reason="needs root, mmdebstrap (and Debian's archive, the first time) and tar2sqfs",
    ),
]
IMAGE = "swebox/py39-calc:harbor"
ENV = "swebox.envs.frameworks.harbor_env:SweboxEnvironment"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(venv, store, tasks folder): the py39 image in a store; three task folders that FROM it."""
    venv = harbor_venv()
    root = tmp_path_factory.mktemp("harbor312")
    store = LayerStore(root / "store")
    import_image(store, oci_layout(py39_layout(root / "image"), "latest"), IMAGE, "linux/amd64")
    tasks = root / "tasks"
    write_task(tasks, IMAGE, name="greet")
    write_task(tasks, IMAGE, name="greet-json", reward="json")
    row = Task(
        instance_id="py39-calc",
        repo="calc",
        patch=GOLD,
        test_cmd=f"{VENV_PYTHON} -m pytest",
        problem_statement="add(2, 3) returns -1 instead of 5.",
        metadata={"image": IMAGE},
        FAIL_TO_PASS=["tests/test_calc.py::test_add"],
        PASS_TO_PASS=["tests/test_calc.py::test_mul"],
    )
    assert export([row], tasks)[1] == []
    yield venv, store, tasks, root
    # the harbor processes left their node caches' layers mounted for the next trial (a node cache's way);
    # nobody uses them now: unmount them, so the temporary folders can go
    for node in (root / "node", root / "contract" / "node"):
        if node.is_dir():
            LayerCache(store, LayerCacheConfig(root=str(node))).close()
    assert str(root) not in Path("/proc/self/mountinfo").read_text()


def _harbor_run(venv: Path, tasks: Path, store: LayerStore, root: Path, agent: str) -> dict[str, dict]:
    jobs = root / "jobs"
    proc = run_in(
        venv,
        "harbor",
        "run",
        "-p",
        str(tasks),
        "-a",
        agent,
        "--env",
        ENV,
        "--ek",
        f"store={store.root}",
        "--ek",
        f"cache_root={root / 'node'}",
        "-o",
        str(jobs),
        "--job-name",
        agent,
        "-n",
        "2",
        "-y",
        "-q",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = {}
    for trial in sorted((jobs / agent).glob("*/result.json")):
        result = json.loads(trial.read_text())
        out[result["task_name"]] = result
    return out


def test_harbor_run_oracle_pays_1_and_nop_pays_0_in_swebox_sandboxes(setup):
    venv, store, tasks, root = setup
    oracle = _harbor_run(venv, tasks, store, root, "oracle")
    nop = _harbor_run(venv, tasks, store, root, "nop")
    assert sorted(oracle) == sorted(nop) == ["greet", "greet-json", "py39-calc"]
    for name in oracle:
        assert oracle[name]["exception_info"] is None and nop[name]["exception_info"] is None, (oracle, nop)
        assert oracle[name]["verifier_result"]["rewards"]["reward"] == 1, oracle[name]["verifier_result"]
        assert nop[name]["verifier_result"]["rewards"]["reward"] == 0, nop[name]["verifier_result"]
    assert oracle["greet-json"]["verifier_result"]["rewards"] == {"reward": 1, "fixed": 1}
    log = next((root / "jobs" / "nop").glob("greet__*/verifier/test-stdout.txt")).read_text()
    assert "AssertionError: Hello ADA" in log  # the verifier really ran the task's test against the bug


def test_provider_meets_harbors_environment_contract(setup):
    venv, store, tasks, root = setup
    work = root / "contract"
    work.mkdir()
    proc = run_in(
        venv,
        "python",
        str(REPO / "tests" / "harbor_contract.py"),
        str(tasks / "greet"),
        str(store.root),
        str(work),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["type"] == "swebox"
    assert seen["exec"] == ["/app\nplain\n", "to-stderr\n", 3]  # WORKDIR and ENV from the Dockerfile
    assert seen["exec_cwd_env"] == ["/tmp\na b\n", 0] and seen["exec_fresh"] == "/app\n"
    assert seen["timeout"] == "Command timed out after 1 seconds"
    assert seen["uploaded"] == "AB\n/data/tree\n/data/tree/a.txt\n/data/tree/sub\n/data/tree/sub/b.sh\n"
    assert seen["is_dir"] == [True, False] and seen["is_file"] == [True, False]
    assert seen["downloaded"] == ["top.txt", "tree", "tree/top.txt", "tree/x", "tree/x/x.txt"]
    assert seen["downloaded_x"] == "X\n"
    assert seen["user"].startswith("swebox environment: expected user root") and "found 'nobody'" in seen["user"]
    assert seen["after_stop"].startswith("swebox environment: expected start() before use")


def test_exported_folders_pass_harbor_lint_and_load_as_harbor_tasks(setup, tmp_path):
    venv, _, tasks, _ = setup
    from swebox.envs.cache import EnvSpec

    synth = calc_task(instance_id="toolz-synth", env=EnvSpec(source="pypi:toolz==1.0.0"))
    written, refused = export([synth], tmp_path)
    assert refused == []
    folders = [str(written[0]), str(tasks / "py39-calc")]
    lint = run_in(venv, "harbor", "lint", "--json", *folders, timeout=300)
    findings = json.loads(lint.stdout)
    # swebox's verdict reads the agent's changes in its container (shared) and its env recipe installs
    # pytest unpinned, as swebox's own env builder does: the two findings by design; nothing else
    assert {f["rule"] for f in findings} <= {"shared-verifier", "unpinned-python-dependency"}, findings
    parse = run_in(
        venv,
        "python",
        "-c",
        "import sys, json\nfrom harbor.models.task.task import Task\n"
        "print(json.dumps([[Task(p).name, Task(p).config.verifier.timeout_sec, "
        "Task(p).config.verifier.environment_mode.value, Task(p).instruction[:20]] "
        "for p in sys.argv[1:]]))",
        *folders,
        timeout=120,
    )
    assert parse.returncode == 0, parse.stderr[-2000:]
    assert json.loads(parse.stdout) == [
        ["toolz-synth", 1800.0, "shared", "add(2, 3) returns -1"],
        ["py39-calc", 1800.0, "shared", "add(2, 3) returns -1"],
    ]
