"""Interpreter layers: the machine's pyenv build of Python 3.9 as a layer at /opt/swebox/python/3.9, and an env
layer built on it that needs nothing of the host's interpreter.

pyenv's build lies under root's 0700 home and its binary's and extension modules' RUNPATH names that folder:
the sandbox's unprivileged root can run neither. The layer is the build copied and relocated
(swebox.envs.cache.pythons); here it runs in a sandbox (ssl, sqlite3, ctypes, a venv whose home is the layer),
its key is the same for the same install, and an env layer built from it runs a real pytest (pytest 8.4.2's
wheels, from a local folder named by PIP_FIND_LINKS/PIP_NO_INDEX, which the build forwards: offline) only with
the layer below it, and grading through the store (as `swebox tasks validate`) resolves the gold patch and not
the empty diff.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec, LayerCache, LayerCacheConfig, LayerStore, builder
from swebox.envs.cache.builder import BuilderConfig, InterpreterMismatch, _Python, _python, build_env
from swebox.envs.cache.elf_runpath import RunpathError, read_runpath, relocate_runpath
from swebox.envs.cache.interpreters import Interpreter, discover
from swebox.envs.cache.pythons import (
    PythonImportError,
    find_python_layer,
    import_python,
    make_tree,
    probe,
    tree_digest,
)
from swebox.envs.cache.toolchains import env_toolchains, release_toolchain_layers, toolchain_env
from swebox.envs.episodes.layers_resolver import _with_toolchains
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks import Task
from swebox.envs.tasks.validate import StoreLayers, validate_task

from tests.pyenv_python import readable_python

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
PYTEST_39 = Path(os.path.expanduser("~/.cache/swebox/test-wheels-py39"))
TESTS = (
    "from calc import add\n\n\ndef test_holds():\n    assert add(0, 0) == 0\n\n\n"
    "def test_breaks():\n    assert add(2, 2) == 4\n"
)
GOLD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


def _pyenv(minor: str) -> Path:
    builds = sorted(PYENV.glob(f"{minor}.*"), key=lambda p: tuple(int(x) for x in p.name.split(".")))
    if not builds:
        pytest.skip(f"needs pyenv's Python {minor} (in {PYENV})")
    return builds[-1]


@pytest.fixture(scope="module")
def layer_store(tmp_path_factory):
    """A store holding the interpreter layer of pyenv's 3.9 (imported once for the module)."""
    store = LayerStore(tmp_path_factory.mktemp("pythons") / "store")
    manifest = import_python(store, str(_pyenv("3.9")))
    yield store, manifest
    release_toolchain_layers()


def test_runpath_is_rewritten_in_place_and_a_longer_one_refused(tmp_path):
    build = _pyenv("3.9")
    binary = tmp_path / "bin" / "python3.9"
    binary.parent.mkdir()
    shutil.copy2(build / "bin" / "python3.9", binary)
    assert read_runpath(binary) == f"{build}/lib"
    assert relocate_runpath(binary, str(build), tmp_path) == "$ORIGIN/../lib"
    assert (
        read_runpath(binary) == "$ORIGIN/../lib" and binary.stat().st_size == (build / "bin/python3.9").stat().st_size
    )
    assert relocate_runpath(binary, str(build), tmp_path) is None  # nothing under the old prefix any more
    deep = tmp_path / ("d" * 40) / ("e" * 40)
    shutil.copy2(build / "bin" / "python3.9", tmp_path / "again")
    with pytest.raises(RunpathError, match="patchelf"):  # $ORIGIN/../../<80 chars>/lib does not fit
        relocate_runpath(tmp_path / "again", str(build), deep)
    assert read_runpath(tmp_path / "again") == f"{build}/lib"  # a refused file is left as it was


def test_a_system_interpreter_or_a_venv_is_refused():
    with pytest.raises(PythonImportError, match="self-contained prefix"):
        probe("/usr/bin/python3")
    with pytest.raises(PythonImportError, match="found the venv"):
        probe(sys.executable if sys.prefix != sys.base_prefix else pytest.skip("not run from a venv"))
    with pytest.raises(PythonImportError, match="does not run"):
        probe("/nonexistent/prefix")


def test_the_layer_runs_in_a_sandbox_and_its_key_is_stable(layer_store, tmp_path):
    store, manifest = layer_store
    assert manifest.kind == "python" and manifest.meta["prefix"] == "/opt/swebox/python/3.9"
    assert manifest.meta["version"].startswith("3.9.") and find_python_layer(store, "3.9") == manifest
    assert import_python(store, str(_pyenv("3.9"))) == manifest  # the same install: reused, not copied again
    # the same input gives the same key: a second relocated copy hashes the same
    source = probe(str(_pyenv("3.9")))
    again = tmp_path / "again"
    make_tree(source, again)
    assert manifest.key == f"python-{source.version}-{tree_digest(again)[:20]}"
    cache = LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node")))
    try:
        with cache.acquire(manifest.key) as layer, Sandbox([layer.path]) as sb:
            run = sb.exec(
                "P=/opt/swebox/python/3.9/bin/python3.9; $P -c 'import ssl, sqlite3, ctypes, venv, sys; "
                "print(sys.prefix, ssl.OPENSSL_VERSION, sqlite3.connect(\":memory:\").execute(\"select 6*7\")"
                ".fetchone()[0])' && $P -m venv --without-pip /tmp/v && cat /tmp/v/pyvenv.cfg "
                "&& /tmp/v/bin/python -c 'import sys; print(sys.prefix)' "
                "&& head -1 /opt/swebox/python/3.9/bin/pydoc3.9",
                timeout=300,
            )
    finally:
        cache.close()
    assert run.exit_code == 0, run.output
    assert "/opt/swebox/python/3.9 OpenSSL" in run.output and " 42\n" in run.output, run.output
    assert "home = /opt/swebox/python/3.9/bin" in run.output, run.output
    assert "\n/tmp/v\n" in run.output, run.output  # the venv is one (ensurepip's pip: the env build below)
    assert "#!/opt/swebox/python/3.9/bin/python3.9" in run.output, run.output  # shebangs relocated


def _wheels_39() -> Path:
    """pytest 8.4.2 and its dependencies as wheels for CPython 3.9 (downloaded once). pip download evaluates
    dependency markers for the running interpreter, not ``--python-version``: 3.9's own are named."""
    if not any(PYTEST_39.glob("tomli-*.whl")):
        PYTEST_39.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.9"]
            + ["--implementation", "cp", "-d", str(PYTEST_39), "pytest==8.4.2"]
            + ["exceptiongroup==1.3.1", "tomli==2.4.1", "typing-extensions==4.15.0"],
            check=True,
            timeout=600,
        )
        os.chmod(PYTEST_39, 0o755)
    return PYTEST_39


def _repo(folder: Path) -> str:
    (folder / "tests").mkdir(parents=True)
    (folder / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (folder / "conftest.py").write_text("")  # puts the checkout on sys.path, as the project's own would
    (folder / "tests" / "test_sums.py").write_text(TESTS)
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.e2e
def test_an_env_layer_built_on_the_layer_runs_pytest_only_over_it(layer_store, tmp_path, monkeypatch):
    store, manifest = layer_store
    monkeypatch.setenv("PIP_FIND_LINKS", str(_wheels_39()))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    repo = tmp_path / "repo"
    spec = EnvSpec(source=str(repo), commit=_repo(repo), python="3.9", install=(), test_deps=("pytest==8.4.2",))
    discover.cache_clear()
    try:
        env = build_env(store, spec, config=BuilderConfig(python_layers="always"))
    finally:
        discover.cache_clear()
    assert env.meta["python_layer"] == manifest.key and env.meta["interpreters"] == []  # nothing bound from the host
    under = env_toolchains(store, env.key)
    assert under.interpreter == {"python3.9": manifest.key} and under.toolchains == {}
    assert under.layers == {"python3.9": manifest.key} and toolchain_env(list(under.toolchains)) == {}
    assert manifest.key in store.toolchain_layers()  # gc keeps it while the env is there
    # episodes and grades stack it below the env layer, as they stack toolchain layers
    assert _with_toolchains(store, [("env", env.key)]) == [("python:python3.9", manifest.key), ("env", env.key)]
    cache = LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node")))
    try:
        with cache.acquire(manifest.key) as python, cache.acquire(env.key) as layer:
            with Sandbox([python.path, layer.path]) as sb:
                cfg = sb.exec("cat /venv/pyvenv.cfg", timeout=60).output
                run = sb.exec("cd /testbed && /venv/bin/python -m pytest -rA tests/test_sums.py", timeout=300)
            with Sandbox([layer.path]) as sb:  # the env alone: its venv's interpreter is not there
                alone = sb.exec("/venv/bin/python -c 'print(1)'", timeout=60)
    finally:
        cache.close()
    assert "home = /opt/swebox/python/3.9/bin" in cfg, cfg
    assert "PASSED tests/test_sums.py::test_holds" in run.output, run.output
    assert "FAILED tests/test_sums.py::test_breaks" in run.output and run.exit_code == 1, run.output
    assert "platform linux -- Python 3.9." in run.output, run.output
    assert alone.exit_code != 0, alone.output
    # graded as `swebox tasks validate` grades (the store's layers, the interpreter layer stacked below the env):
    # the gold patch resolves, the empty diff does not
    tests = {"FAIL_TO_PASS": ["tests/test_sums.py::test_breaks"], "PASS_TO_PASS": ["tests/test_sums.py::test_holds"]}
    task = Task.from_dict({"instance_id": "calc-1", "repo": "calc", "env": spec.to_dict(), "patch": GOLD, **tests})
    layers = StoreLayers(store.root)
    try:
        verdict = validate_task(task, layers, timeout=300)
    finally:
        layers.close()
    assert verdict.passed and verdict.gold is not None and verdict.gold.resolved, verdict
    assert verdict.empty is not None and not verdict.empty.resolved, verdict


def test_env_builds_choose_the_stores_layer_unless_told_never(layer_store, monkeypatch):
    store, manifest = layer_store
    spec = EnvSpec(source="pypi:toolz==1.0.0", python="3.9")
    chosen = _python(store, spec, BuilderConfig())
    assert chosen.layer_key == manifest.key and chosen.interp.path == "/opt/swebox/python/3.9/bin/python3.9"
    reachable = Interpreter("/opt/python/3.9/bin/python3.9", "3.9.18", "/opt/python/3.9", True)
    monkeypatch.setattr(builder, "find_interpreter", lambda wanted: reachable)
    assert _python(store, spec, BuilderConfig(python_layers="never")) == _Python(reachable)
    with pytest.raises(ValueError, match="python_layers"):
        BuilderConfig(python_layers="sometimes")


def test_auto_imports_a_reachable_install_and_binds_only_a_system_one(tmp_path, monkeypatch):
    """Under "auto" an install the sandbox could reach (tests/pyenv_python.py's readable copy, which
    $SWEBOX_PYTHONS names) becomes a layer as pyenv's own would: bound at its host path, the env would need that
    path on every node, and the interpreter a spec gets would hang on the host's folder modes. The system's
    /usr/bin/python3.X cannot be a layer (its files are all over /usr, bound into every sandbox) and is bound."""
    copy = readable_python("3.9")
    store = LayerStore(tmp_path / "store")
    spec = EnvSpec(source="pypi:toolz==1.0.0", python="3.9")
    reachable = Interpreter(f"{copy}/bin/python3.9", "3.9.18", str(copy), True)
    monkeypatch.setattr(builder, "find_interpreter", lambda wanted: reachable)
    chosen = _python(store, spec, BuilderConfig())
    assert chosen.layer_key and store.get(chosen.layer_key).meta["source"] == str(copy)
    assert chosen.interp.prefix == "/opt/swebox/python/3.9" and chosen.identity == chosen.layer_key
    system = Interpreter("/usr/bin/python3.11", "3.11.2", "/usr", True)
    monkeypatch.setattr(builder, "find_interpreter", lambda wanted: system)
    bound = _python(store, EnvSpec(source="pypi:toolz==1.0.0", python="3.11"), BuilderConfig())
    assert bound == _Python(system) and bound.identity == "host:/usr/bin/python3.11@3.11.2"


def test_a_pinned_interpreter_layer_is_used_or_its_absence_named(layer_store, tmp_path):
    store, manifest = layer_store
    spec = EnvSpec(source="pypi:toolz==1.0.0", python="3.9", interpreter=manifest.key)
    assert _python(store, spec, BuilderConfig()).layer_key == manifest.key
    with pytest.raises(ValueError, match="pins the interpreter layer"):
        _python(store, spec, BuilderConfig(python_layers="never"))
    with pytest.raises(RuntimeError, match=rf"expected the interpreter layer {manifest.key} in the store"):
        _python(LayerStore(tmp_path / "empty"), spec, BuilderConfig())


def test_an_env_layer_built_on_another_interpreter_is_not_reused(layer_store, tmp_path):
    """An unpinned spec is keyed by its recipe alone: the store's layer of that key, made on another interpreter
    (here: the host's bound install, as builds before interpreter layers made them), is refused, not reused,
    and left as it was; pinned to the layer the build would use, the spec has another key."""
    store, manifest = layer_store
    spec = EnvSpec(source="pypi:toolz==1.0.0", python="3.9")
    tree = tmp_path / "old-env"
    (tree / "swebox").mkdir(parents=True)
    (tree / "swebox" / "env.json").write_text("{}\n")
    old_python = "/var/tmp/swebox-test-pythons/3.9.18/bin/python3.9"
    meta = {"spec": spec.to_dict(), "python": "3.9.18", "interpreter": old_python, "interpreters": [old_python]}
    with store.lock(spec.key()):
        old = store.publish(spec.key(), tree, kind="env", meta=meta)
    with pytest.raises(InterpreterMismatch) as err:
        build_env(store, spec)
    assert f"expected its layer to be built on {manifest.key}" in str(err.value)
    assert f"found one built on host:{old_python}@3.9.18" in str(err.value)
    assert store.get(spec.key()) == old
    pinned = EnvSpec(source="pypi:toolz==1.0.0", python="3.9", interpreter=manifest.key)
    assert pinned.key() != spec.key() and store.get(pinned.key()) is None


def test_a_copy_moved_by_hand_is_relocated_from_the_prefix_it_was_built_for(tmp_path):
    """tests/pyenv_python.py's copy keeps pyenv's folder in its _sysconfigdata (its RUNPATH is already
    $ORIGIN-relative): the layer made from it names /opt/swebox/python/3.9 (the sandbox check asserts it)."""
    copy = readable_python("3.9")
    source = probe(str(copy))
    assert source.prefix == str(copy) and source.built_for.startswith(str(PYENV))
    manifest = import_python(LayerStore(tmp_path / "store"), str(copy))
    assert manifest.meta["source"] == str(copy) and manifest.meta["prefix"] == "/opt/swebox/python/3.9"
