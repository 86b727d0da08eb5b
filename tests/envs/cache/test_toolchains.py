"""Toolchain layers built from Debian's packages and used in real sandboxes (network: deb.debian.org only).

Each toolchain is built at most once per store; the store is shared by test sessions
($SWEBOX_TEST_TOOLCHAIN_STORE, default /var/tmp/swebox-test-toolchains): its layers are content-addressed, so
a later session reuses them only when apt resolves the very same packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from swebox.envs.cache import debs, toolchains
from swebox.envs.cache.store import BuildFailure, LayerStore
from swebox.envs.cache.toolchain_specs import TOOLCHAINS, ToolchainSpec, UnknownToolchain
from swebox.envs.cache.toolchains import (
    build_toolchain,
    resolve,
    toolchain_env,
    toolchain_layer,
)
from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.sandbox.policy import DEFAULT_ENV

from tests.debian_tools import toolchain_store

from .conftest import IS_ROOT

pytestmark = pytest.mark.skipif(
    not IS_ROOT or shutil.which("apt-get") is None or shutil.which("mksquashfs") is None,
    reason="needs apt-get, mksquashfs and root (loop mounts of squashfs layers)",
)


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    """The shared test store; the layers are mounted in a node cache of this module's own (never the user's
    shared /var/tmp one, whose layers other processes use), unmounted at its end."""
    root = toolchain_store()
    before = os.environ.get("SWEBOX_LAYER_CACHE")
    os.environ["SWEBOX_LAYER_CACHE"] = str(tmp_path_factory.mktemp("node-cache"))
    yield root
    toolchains.release_toolchain_layers()
    if before is None:
        os.environ.pop("SWEBOX_LAYER_CACHE", None)
    else:
        os.environ["SWEBOX_LAYER_CACHE"] = before


def _sandbox(layers, names, extra=()) -> Sandbox:
    policy = SandboxPolicy(network="none", env={**DEFAULT_ENV, **toolchain_env(names)})
    return Sandbox([*layers, *extra], policy)


def _ok(sb: Sandbox, command: str) -> str:
    result = sb.exec(command, timeout=600)
    assert result.exit_code == 0, f"`{command}` failed ({result.exit_code}):\n{result.output}"
    return result.output


def test_node_and_npm_run_from_the_layer_not_the_host(store_root):
    layer = toolchain_layer("node", store_root)
    with _sandbox([layer], ["node"]) as sb:
        assert _ok(sb, "command -v node").strip() == "/opt/toolchains/node/usr/bin/node"
        version = _ok(sb, "node -e 'console.log(process.version, process.execPath)'").split()
        assert version[0].startswith("v18."), version  # Debian bookworm's node; the host's /usr/bin/node is 20
        assert version[1].startswith("/opt/toolchains/node/"), version
        assert _ok(sb, "npm --version").strip().split(".")[0] == "9"
        # npm works on a project: its cache goes to /pkgcache/npm, never into the project
        _ok(sb, "mkdir -p /work/p && cd /work/p && npm init -y >/dev/null && npm run env >/dev/null")
        assert _ok(sb, "cd /work/p && node -p 'require(\"./package.json\").name'").strip() == "p"
        assert _ok(sb, "npm config get cache").strip() == "/pkgcache/npm"


def test_go_builds_and_tests_a_module_in_a_sandbox(store_root):
    layer = toolchain_layer("go", store_root)
    with _sandbox([layer], ["go"]) as sb:
        assert _ok(sb, "command -v go").strip() == "/opt/toolchains/go/usr/lib/go-1.19/bin/go"
        assert "go1.19" in _ok(sb, "go version")
        _ok(sb, "mkdir -p /work/m")
        sb.write_file("/work/m/go.mod", "module example.com/m\n\ngo 1.19\n")
        sb.write_file("/work/m/add.go", "package m\n\nfunc Add(a, b int) int { return a + b }\n")
        sb.write_file(
            "/work/m/add_test.go",
            'package m\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n'
            '\tif Add(2, 3) != 5 {\n\t\tt.Fatal("bad sum")\n\t}\n}\n',
        )
        out = _ok(sb, "cd /work/m && go test -v ./...")
        assert "--- PASS: TestAdd" in out
        sb.write_file("/work/m/add.go", "package m\n\nfunc Add(a, b int) int { return a - b }\n")
        failed = sb.exec("cd /work/m && go test ./...", timeout=600)
        assert failed.exit_code != 0 and "bad sum" in failed.output
        assert _ok(sb, "go env GOCACHE").strip() == "/pkgcache/go-build"


def test_same_inputs_give_the_same_key(store_root):
    store = LayerStore(store_root)
    manifest = build_toolchain(store, "go")  # built (or reused) by the test above
    toolchains._resolved.clear()
    fresh = resolve("go")  # from apt again, no saved answer
    assert fresh["key"] == manifest.key
    assert [d["sha256"] for d in fresh["debs"]] == [d["sha256"] for d in manifest.meta["debs"]]
    assert all(len(d["sha256"]) == 64 and d["version"] for d in manifest.meta["debs"])
    assert build_toolchain(store, "go").created == manifest.created  # reused, not rebuilt
    content = {
        "toolchain": "go",
        "layout": toolchains.TOOLCHAIN_LAYOUT,
        "prefix": "/opt/toolchains/go",
        "aliases": {},
        "debs": [[d["package"], d["version"], d["arch"], d["sha256"]] for d in manifest.meta["debs"]],
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert manifest.key == f"toolchain-go-{digest[:20]}"


def test_unknown_name_is_a_one_line_error(tmp_path):
    with pytest.raises(UnknownToolchain) as info:
        toolchain_layer("cobol", tmp_path)
    message = str(info.value)
    assert "\n" not in message and "'cobol'" in message and "node, go, rust, jdk, cc" in message
    with pytest.raises(UnknownToolchain):
        toolchain_env(["go", "cobol"])
    with pytest.raises(UnknownToolchain):  # an interpreter layer's name is not a toolchain's (UnderEnv tells them)
        toolchain_env(["python3.9"])
    assert not (tmp_path / "manifests").exists()


def _tiny(monkeypatch, check: str) -> str:
    spec = ToolchainSpec("tiny", ("make",), own=("make",), check=check)
    monkeypatch.setitem(TOOLCHAINS, "tiny", spec)
    return "tiny"


def _leftovers(store: LayerStore, work: Path) -> list[Path]:
    return [
        *store.root.joinpath("manifests").iterdir(),
        *store.root.joinpath("tmp").iterdir(),
        *store.root.joinpath("blobs").rglob("*.*"),
        *work.iterdir(),
    ]


def test_a_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    name = _tiny(monkeypatch, "make --version && echo the check says no && exit 3")
    store, work = LayerStore(tmp_path / "store"), tmp_path / "work"
    work.mkdir()
    with pytest.raises(BuildFailure, match="the check says no"):
        build_toolchain(store, name, work_dir=str(work))
    assert _leftovers(store, work) == []
    key = resolve(name)["key"]
    assert store.failure(key) is not None  # recorded: the spec's fault, fails fast until --force


def test_an_interrupted_build_leaves_nothing_behind(tmp_path, monkeypatch):
    name = _tiny(monkeypatch, "make --version")
    store, work = LayerStore(tmp_path / "store"), tmp_path / "work"
    work.mkdir()

    def interrupted(deb, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(debs, "extract", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_toolchain(store, name, work_dir=str(work))
    assert _leftovers(store, work) == []
    assert store.failure(resolve(name)["key"]) is None  # an interrupt says nothing about the spec
    monkeypatch.undo()
    monkeypatch.setitem(TOOLCHAINS, "tiny", ToolchainSpec("tiny", ("make",), own=("make",), check="make --version"))
    manifest = build_toolchain(store, name, work_dir=str(work))
    assert [d["package"] for d in manifest.meta["debs"]] == ["make"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "name,tool,command,expect",
    [
        (
            "rust",
            "cargo",
            "cd /work && cargo new -q --vcs none hello && cd hello && cargo run -q --offline",
            "Hello, world!",
        ),
        (
            "cc",
            "g++",
            "cd /work && printf '#include <iostream>\\nint main(){std::cout<<\"hi \"<<__GNUC__;}' > a.cc && "
            "printf 'a: a.cc\\n\\tg++ -o a a.cc\\n' > Makefile && make -s && ./a && command -v g++",
            "hi 12",
        ),
        (
            "jdk",
            "javac",
            "cd /work && printf 'class A{public static void main(String[] a){System.out.println(\"hi \"+"
            "System.getProperty(\"java.home\"));}}' > A.java && javac A.java && java A && mvn --version && "
            # Maven's global settings (Debian's link to /etc/maven) are the layer's, naming its Debian repository
            "grep -q file:///opt/toolchains/jdk/usr/share/maven-repo "
            "/opt/toolchains/jdk/usr/share/maven/conf/settings.xml",
            "hi /opt/toolchains/jdk/",
        ),
    ],
)
def test_rust_cc_and_jdk_build_and_run_in_a_sandbox(store_root, name, tool, command, expect):
    layer = toolchain_layer(name, store_root)
    with _sandbox([layer], [name]) as sb:
        assert _ok(sb, f"command -v {tool}").startswith(f"/opt/toolchains/{name}/")  # the layer's, not the host's
        out = _ok(sb, f"mkdir -p /work && {command}")
        assert expect in out


def test_cli_builds_lists_and_refuses_unknown_names(store_root, tmp_path, capsys):
    from swebox.scripts.cli import main

    assert main(["cache", "--store", str(tmp_path / "new"), "toolchain", "build", "go", "cobol"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "expected names among node, go, rust, jdk, cc; found 'cobol'" in err
    assert not (tmp_path / "new").exists()  # nothing written for a bad name
    assert main(["cache", "--store", str(store_root), "toolchain", "build", "go"]) == 0
    assert "already built" in capsys.readouterr().out  # built by the tests above, reused
    assert main(["cache", "--store", str(store_root), "toolchain", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert set(rows) == set(TOOLCHAINS) and " built " in rows["go"] and "/opt/toolchains/go" in rows["go"]
