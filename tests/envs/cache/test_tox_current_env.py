"""tox-style test commands (SWE-bench's sphinx rows: ``tox --current-env -epy39 -v -- TESTS``) give test results.

tox-current-env runs the tests through a symlink to the venv's interpreter in ``.tox/py39/bin``. Python finds its
venv by resolving every symlink first, so through a venv whose interpreter is itself a symlink it ran the base
interpreter without the venv's packages: ``No module named pytest`` and ~400 characters of output, "the log
parser found no test results" (sphinx-10449, sphinx-10673). A real env layer built the way the sphinx recipe
builds one (Python 3.9 from the machine's pyenv build, relocated as tests/pyenv_python.py does, imported as an
interpreter layer stacked below the env; tox 4.16.0 and tox-current-env 0.0.11 from PyPI), over a small project
with sphinx's shape of tox.ini (``pytest -rA`` in its commands, as the recipe's pre_install makes it), run as
the log grader runs the command, read by SWE-bench's sphinx parser.
"""

from __future__ import annotations

import subprocess

import pytest
from swebox.envs.cache import EnvSpec, LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.builder import build_env
from swebox.envs.cache.interpreters import discover
from swebox.envs.cache.toolchains import env_toolchains
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.graders.log_parsers import parse_log

from tests.pyenv_python import readable_python

TOX_INI = """[tox]
envlist = py39

[testenv]
usedevelop = True
setenv =
    PYTHONWARNINGS = all
commands=
    python -X dev -m pytest -rA --durations 25 {posargs}
"""
TESTS = "def test_holds():\n    assert sum(range(4)) == 6\n\n\ndef test_breaks():\n    assert sum(range(4)) == 7\n"


@pytest.mark.e2e
def test_tox_current_env_runs_the_venvs_pytest(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEBOX_PYTHONS", str(readable_python("3.9")))
    discover.cache_clear()
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tox.ini").write_text(TOX_INI)
    (repo / "tests" / "test_sums.py").write_text(TESTS)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    spec = EnvSpec(
        source=str(repo),
        commit=head,
        python="3.9",
        test_deps=(),
        install=("pip install tox==4.16.0 tox-current-env==0.0.11 pytest==7.4.4",),
    )
    store = LayerStore(tmp_path / "store")
    try:
        build_env(store, spec)
    finally:
        discover.cache_clear()
    # the copy $SWEBOX_PYTHONS names is imported as an interpreter layer (never bound from /var/tmp): stacked
    # below the env, as every reader of the env's manifest stacks it
    (python,) = env_toolchains(store, spec.key()).interpreter.values()
    cache = LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node")))
    try:
        with cache.acquire(python) as under, cache.acquire(spec.key()) as env, Sandbox([under.path, env.path]) as sb:
            # the log grader's clean environment (log_grading.grading_env), the recipe's command
            run = sb.exec(
                "mkdir -p /tmp/home && env -i PATH=/venv/bin:/usr/local/bin:/usr/bin:/bin HOME=/tmp/home "
                "LANG=C.UTF-8 LC_ALL=C.UTF-8 TMPDIR=/tmp TERM=dumb bash -c "
                "'cd /testbed && tox --current-env -epy39 -v -- tests/test_sums.py'",
                timeout=300,
            )
    finally:
        cache.close()
    assert "No module named pytest" not in run.output, run.output
    assert parse_log("sphinx-doc/sphinx", run.output) == {
        "tests/test_sums.py::test_holds": "PASSED",
        "tests/test_sums.py::test_breaks": "FAILED",
    }, run.output
