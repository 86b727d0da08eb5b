"""A git mirror that lacks an object: a per-row error naming the object, its path and the fix, never recorded.

astropy-14365's mirror lacked one blob, and the build said only `git archive ... tar: Unexpected EOF in archive`.
A real bare mirror (a local clone) with one loose blob deleted, for the env build (`git archive` of the env
commit) and for a checkout layer (the base commit's version of a file).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec, LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.builder import build_env
from swebox.envs.cache.checkout import CheckoutSpec, build_checkout_layer
from swebox.envs.cache.sources import MirrorError, missing_objects

SOURCE = "git+https://github.com/o/n.git"


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def _mirror(tmp_path: Path) -> tuple[Path, str, str]:
    """A bare mirror of a repository with two commits: base (pkg/mod.py = 1), setup (pkg/mod.py = 2)."""
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    (work / "pkg" / "mod.py").write_text("x = 1\n")
    (work / "README").write_text("r\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "base")
    base = _git(work, "rev-parse", "HEAD")
    (work / "pkg" / "mod.py").write_text("x = 2\n")
    _git(work, "commit", "-qam", "setup")
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "o__n.git")], check=True)
    return mirror, base, _git(work, "rev-parse", "HEAD")


def _drop(repo: Path, sha: str) -> None:
    loose = repo / "objects" / sha[:2] / sha[2:]
    assert loose.is_file(), "a local clone keeps loose objects"
    loose.unlink()


def test_an_env_build_names_the_missing_blob_and_the_fix(tmp_path):
    mirror, _, setup = _mirror(tmp_path)
    repo = mirror / "o__n.git"
    blob = _git(repo, "rev-parse", f"{setup}:pkg/mod.py")
    assert missing_objects(repo, setup) == []
    _drop(repo, blob)
    assert missing_objects(repo, setup) == [f"{blob} (pkg/mod.py)"]
    store = LayerStore(tmp_path / "store")
    spec = EnvSpec(source=SOURCE, commit=setup, install=(), test_deps=())
    for _ in range(2):  # not recorded: the retry runs again, no --force needed
        with pytest.raises(
            MirrorError,
            match=rf"expected every object of commit {setup}; found missing: {blob} "
            rf"\(pkg/mod\.py\).*git -C {repo} fetch --refetch origin",
        ):
            build_env(store, spec, mirror=str(mirror))
    assert store.failure(spec.key()) is None


def test_a_checkout_layer_names_the_missing_blob_of_its_base_commit(tmp_path):
    mirror, base, setup = _mirror(tmp_path)
    repo = mirror / "o__n.git"
    store = LayerStore(tmp_path / "store")
    env = EnvSpec(source=SOURCE, commit=setup, install=(), test_deps=())
    build_env(store, env, mirror=str(mirror))
    blob = _git(repo, "rev-parse", f"{base}:pkg/mod.py")  # only the base commit's version of the file
    _drop(repo, blob)
    spec = CheckoutSpec(env=env, commit=base)
    cache = LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node")))
    try:
        with pytest.raises(MirrorError, match=rf"commit {base}; found missing: {blob} \(pkg/mod\.py\)"):
            build_checkout_layer(store, spec, mirror=str(mirror), cache=cache)
    finally:
        cache.close()
    assert store.failure(spec.key()) is None
