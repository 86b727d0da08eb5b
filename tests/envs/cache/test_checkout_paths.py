"""Checkout layers over repositories whose paths git would not take as plain names.

Real repositories track files their own .gitignore ignores (pylint's ``tests/.pylint_primer_tests/.gitkeep``),
commit bytecode as test data (a sphinx test root's ``.pyc``) and name folders with glob characters. The starting
commit of a checkout layer must hold exactly the base commit's tree all the same: before, `git add -A -- PATHS`
took the paths as pathspecs and stopped with ``fatal: pathspec '...' did not match any files`` (pylint-6528), and
the cleanup of bytecode deleted a tracked ``.pyc``. A local git repository, a real env layer (no packages, so no
network) and a real checkout layer.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec, LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.builder import build_env
from swebox.envs.cache.checkout import CheckoutSpec, build_checkout_layer
from swebox.envs.sandbox import Sandbox

GLOB = "tests/roots/test-[x]/conf.py"
SIBLING = "tests/roots/test-x/conf.py"  # what the glob in GLOB's name matches
STAR = "tests/data/a*b.txt"
KEEP = "tests/.primer/.gitkeep"
PYC = "tests/roots/test-pyc/mod.pyc"


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def _write(repo: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkout-paths")
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    # base: what the task starts from; the files git would mistake are changed, added or deleted after it
    _write(
        repo,
        {
            ".gitignore": b"tests/.primer/\n*.pyc\n",
            "a.py": b"x = 1\n",
            GLOB: b"v = 1\n",
            SIBLING: b"v = 1\n",
            STAR: b"one\n",
            PYC: b"\x00\x01base",
        },
    )
    _git(repo, "add", "-A")
    _git(repo, "add", "-f", PYC)
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    # setup (the env's commit): the ignored .gitkeep added, the others changed
    _write(repo, {KEEP: b"", GLOB: b"v = 2\n", STAR: b"two\n", PYC: b"\x00\x01setup"})
    _git(repo, "add", "-A")
    _git(repo, "add", "-f", KEEP, PYC)
    _git(repo, "commit", "-qm", "setup")
    setup = _git(repo, "rev-parse", "HEAD")
    assert KEEP in _git(repo, "ls-files") and _git(repo, "check-ignore", "--no-index", KEEP) == KEEP
    store = LayerStore(root / "store")
    env = EnvSpec(source=str(repo), commit=setup, install=(), test_deps=())
    build_env(store, env)
    cache = LayerCache(store, LayerCacheConfig(root=str(root / "node")))
    yield {"repo": repo, "base": base, "store": store, "env": env, "cache": cache}
    cache.close()


def test_the_starting_commit_holds_the_base_tree_whatever_the_names(world):
    spec = CheckoutSpec(env=world["env"], commit=world["base"])
    manifest = build_checkout_layer(world["store"], spec, cache=world["cache"])
    with (
        world["cache"].acquire(world["env"].key()) as env,
        world["cache"].acquire(manifest.key) as task,
        Sandbox([env.path, task.path]) as sb,
    ):
        out = sb.exec(
            "cd /testbed && git rev-parse 'HEAD^{tree}' && git status --porcelain --ignored=no && "
            f"cat '{GLOB}' '{SIBLING}' '{STAR}' && test ! -e '{KEEP}' && od -c '{PYC}' | head -1",
            timeout=60,
        )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    # exactly the base commit's tree: the ignored file gone, the .pyc kept, each name taken literally
    assert lines[0] == _git(world["repo"], "rev-parse", f"{world['base']}^{{tree}}")
    assert lines[1:4] == ["v = 1", "v = 1", "one"] and "b   a   s   e" in lines[4], lines


def test_install_commands_see_a_clean_committed_tree_and_their_files_join_it(world):
    spec = CheckoutSpec(
        env=world["env"],
        commit=world["base"],
        commands=(
            "git status --porcelain > /tmp/status && test ! -s /tmp/status && "
            "mkdir -p 'new [dir]' && echo made > 'new [dir]/f.txt' && "
            "mkdir -p pkg/__pycache__ && echo x > pkg/__pycache__/m.pyc",
        ),
    )
    manifest = build_checkout_layer(world["store"], spec, cache=world["cache"])
    with (
        world["cache"].acquire(world["env"].key()) as env,
        world["cache"].acquire(manifest.key) as task,
        Sandbox([env.path, task.path]) as sb,
    ):
        out = sb.exec(
            "cd /testbed && git ls-files && git status --porcelain && git rev-list --count HEAD && "
            "test ! -e pkg/__pycache__",
            timeout=60,
        )
    assert out.exit_code == 0, out.output
    tracked = out.output.splitlines()
    assert "new [dir]/f.txt" in tracked and PYC in tracked and KEEP not in tracked
    assert tracked[-1] == "1" and not any(line.startswith(("??", " M", " D")) for line in tracked)
