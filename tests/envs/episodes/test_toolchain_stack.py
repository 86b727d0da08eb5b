"""An env layer built on a toolchain layer (EnvSpec.toolchains) and run the way episodes and grading run it.

The go toolchain comes from the shared test store of tests/envs/cache/test_toolchains.py (built once there, or
here on first use; network: deb.debian.org) and is copied into this test's store, where the env build finds it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec, LayerStore, copy_layers
from swebox.envs.cache.builder import build_env
from swebox.envs.cache.toolchains import build_toolchain, release_toolchain_layers
from swebox.envs.episodes.episode import EpisodeConfig
from swebox.envs.episodes.layers_resolver import LayerSource, acquire_layers, close_shared_caches
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.schema import Task

from tests.debian_tools import toolchain_store

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("apt-get") is None or shutil.which("mksquashfs") is None,
    reason="needs apt-get, mksquashfs and root (loop mounts of squashfs layers)",
)

GO_FILES = {
    "go.mod": "module example.com/calc\n\ngo 1.19\n",
    "calc.go": "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
    "calc_test.go": 'package calc\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n'
    '\t\tt.Fatal("bad sum")\n\t}\n}\n',
}


def _go_repo(root: Path) -> str:
    root.mkdir(parents=True)
    for name, text in GO_FILES.items():
        (root / name).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "go calc"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def test_spec_without_toolchains_keeps_its_key():
    plain = EnvSpec(source="pypi:toolz==1.0.0")
    assert "toolchains" not in plain.to_dict()
    assert plain.key() == EnvSpec.from_dict(plain.to_dict()).key()
    assert plain.canonical_json() == (
        '{"commit":"","install":["pip install -e ."],"python":"3.11","setup":[],'
        '"source":"pypi:toolz==1.0.0","test_deps":["pytest"]}'
    )
    with_go = EnvSpec(source="pypi:toolz==1.0.0", toolchains=("go",))
    assert with_go.to_dict()["toolchains"] == ["go"] and with_go.key() != plain.key()
    assert EnvSpec.from_dict(with_go.to_dict()) == with_go
    with pytest.raises(ValueError, match="EnvSpec.toolchains: expected a list of strings"):
        EnvSpec(source="pypi:toolz==1.0.0", toolchains="go")


def test_env_layer_on_a_toolchain_runs_go_test_where_episodes_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node"))
    shared = LayerStore(toolchain_store())
    store = LayerStore(tmp_path / "store")
    go = build_toolchain(shared, "go")
    copy_layers(shared, store, [go.key])
    head = _go_repo(tmp_path / "calc")
    spec = EnvSpec(
        source=str(tmp_path / "calc"),
        commit=head,
        test_deps=(),
        toolchains=("go",),
        install=("go vet ./... && go test ./... && go env GOCACHE > /swebox/gocache.txt",),
    )
    try:
        manifest = build_env(store, spec)
        assert manifest.meta["toolchains"] == {"go": go.key}
        task = Task(
            instance_id="go-calc", repo="local/calc", problem_statement="x", env=spec, FAIL_TO_PASS=("TestAdd",)
        )
        with acquire_layers(task, LayerSource(store=str(store.root))) as held:
            assert len(held.paths) == 2 and (held.paths[0] / "opt/toolchains/go").is_dir()
            env_layer = held.paths[1]
            assert (env_layer / "swebox/gocache.txt").read_text().strip() == "/pkgcache/go-build"
            assert (env_layer / "pkgcache/go-build").is_dir()  # the build's cache: in the env, not in /testbed
            assert not any("go-build" in p.name for p in (env_layer / "testbed").rglob("*"))
            config = held.configure(EpisodeConfig())
            assert config.sandbox["env"]["GOROOT"] == "/opt/toolchains/go/usr/lib/go-1.19"
            with Sandbox(held.paths, config.policy()) as sb:  # the policy episodes and grading use
                ok = sb.exec("cd /testbed && go test -count=1 ./...", timeout=600)
                assert ok.exit_code == 0 and "ok" in ok.output, ok.output
                sb.exec("cd /testbed && sed -i 's/a + b/a - b/' calc.go", timeout=60)
                bad = sb.exec("cd /testbed && go test -count=1 ./...", timeout=600)
                assert bad.exit_code != 0 and "bad sum" in bad.output, bad.output
    finally:
        release_toolchain_layers()
        close_shared_caches()
