from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec, LayerBuildFailed, LayerStore
from swebox.envs.cache.builder import EnvBuildError, build_env
from swebox.envs.cache.interpreters import InterpreterNotFound
from swebox.envs.sandbox import Sandbox

from .conftest import needs_root
from .fixture_project import write_repo


def _sh(sb: Sandbox, command: str) -> str:
    result = sb.exec(command, timeout=120)
    assert result.exit_code == 0, result.output
    return result.output


def test_env_layer_follows_the_layout(built_env):
    store, spec, manifest, cache = built_env
    assert manifest.kind == "env" and manifest.key == spec.key() and manifest.meta["spec"] == spec.to_dict()
    with cache.acquire(spec.key()) as env:
        top = sorted(os.listdir(env.path))
        assert top == ["swebox", "testbed", "venv"]
        compiled = []
        for folder, dirs, files in os.walk(env.path):
            bad = {".pytest_cache", ".hypothesis"} & set(dirs)
            caches = [f for f in files if f.startswith(".coverage")]
            assert not bad and not caches, folder
            pycs = [os.path.join(folder, f) for f in files if f.endswith(".pyc")]
            if pycs or "__pycache__" in dirs:  # bytecode of third-party code only: never the project's
                assert folder.startswith(str(env.path / "venv" / "lib")) and "site-packages" in folder, folder
                assert not any("calc" in p.rsplit("/", 1)[-1] for p in pycs), pycs
            compiled += pycs
        # pytest and its dependencies are byte-compiled, as checked-hash pycs (flags 0b11: never stale)
        assert any("/_pytest/__pycache__/" in p for p in compiled) and any("/pluggy/" in p for p in compiled)
        assert all(int.from_bytes(Path(p).read_bytes()[4:8], "little") == 3 for p in compiled)
        assert not (env.path / "testbed" / "SECRET_FUTURE_FIX.txt").exists()
        info = json.loads((env.path / "swebox" / "env.json").read_text())
        assert info["spec"] == spec.to_dict()
        assert any(line.startswith("pytest==") for line in info["pip_freeze"])
        assert "python -m pytest --version" in (env.path / "swebox" / "build.log").read_text()
        with Sandbox([env.path]) as sb:
            assert "2 passed" in _sh(sb, "cd /testbed && /venv/bin/python -m pytest -q tests/test_calc.py")
            commits = _sh(sb, "cd /testbed && git rev-list --all --parents").split("\n")
            assert len([c for c in commits if c]) == 1 and len(commits[0].split()) == 1  # one root commit
            refs = _sh(sb, "cd /testbed && git for-each-ref --format='%(refname)'").split()
            assert refs == ["refs/heads/main"]
            assert _sh(sb, "cd /testbed && git remote").strip() == ""
            assert _sh(sb, "cd /testbed && git status --porcelain").strip() == ""
            assert "in-pack: 0" in _sh(sb, "cd /testbed && git count-objects -v")
            assert _sh(sb, "test -e /testbed/.git/logs && echo reflog || echo none").strip() == "none"
            assert _sh(sb, "cd /testbed && git log --all --format=%s").strip() == "swebox env snapshot"
            # the history's deleted file is gone from the object store too
            assert _sh(sb, "cd /testbed && git log --all --stat | grep -c SECRET || true").strip() == "0"


def test_second_build_reuses_the_stored_layer(built_env):
    store, spec, manifest, _ = built_env
    t0 = time.perf_counter()
    assert build_env(store, spec) == manifest
    assert time.perf_counter() - t0 < 1.0


@needs_root
def test_install_failure_is_recorded_with_the_log_tail(tmp_path):
    repo, head = write_repo(tmp_path / "calc")
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    spec = EnvSpec(source=str(repo), commit=head, install=("pip install --no-index no-such-package-xyz",), test_deps=())
    with pytest.raises(
        EnvBuildError,
        match=r"(?s)install failed \(exit 1\).*last lines of the build log.*"
        r"no-such-package-xyz",
    ) as err:
        build_env(store, spec)
    assert "No matching distribution" in err.value.log or "ERROR" in err.value.log
    assert store.get(spec.key()) is None
    assert "install failed" in store.failure(spec.key())["error"]
    assert "no-such-package-xyz" in (tmp_path / "store" / "logs" / f"{spec.key()}.log").read_text()
    t0 = time.perf_counter()
    with pytest.raises(LayerBuildFailed, match="failed to build before"):
        build_env(store, spec)
    assert time.perf_counter() - t0 < 0.5  # not rebuilt
    assert list((tmp_path / "store" / "blobs").glob("*/*")) == []


def test_missing_interpreter_is_a_clear_error_and_not_recorded(tmp_path):
    repo, head = write_repo(tmp_path / "calc")
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    spec = EnvSpec(source=str(repo), commit=head, python="3.99")
    with pytest.raises(InterpreterNotFound, match=r"no Python 3\.99 on this host; available: 3\."):
        build_env(store, spec)
    assert store.failure(spec.key()) is None and store.ls() == []


def test_unknown_commit_is_recorded_as_a_spec_failure(tmp_path):
    repo, _ = write_repo(tmp_path / "calc")
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    spec = EnvSpec(source=str(repo), commit="0" * 40)
    with pytest.raises(Exception, match=f"commit {'0' * 40} does not exist"):
        build_env(store, spec)
    assert store.failure(spec.key()) is not None


@pytest.mark.e2e
@needs_root
def test_pypi_sdist_builds_and_its_tests_run(tmp_path):
    store = LayerStore(tmp_path / "store", fmt="squashfs")
    spec = EnvSpec(source="pypi:toolz==1.0.0")
    manifest = build_env(store, spec)
    from swebox.envs.cache import LayerCache, LayerCacheConfig

    with (
        LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node"))) as cache,
        cache.acquire(manifest.key) as env,
        Sandbox([env.path]) as sb,
    ):
        out = _sh(sb, "cd /testbed && /venv/bin/python -m pytest -q -p no:cacheprovider toolz/tests 2>&1 | tail -3")
        assert " passed" in out and " failed" not in out
        assert _sh(sb, "cd /testbed && git rev-list --all | wc -l").strip() == "1"
