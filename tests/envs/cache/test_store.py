from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from swebox.envs.cache.packing import sha256_file
from swebox.envs.cache.store import BuildFailure, LayerBuildFailed, LayerCorruptError, LayerStore
from swebox.envs.cache.transfer import copy_layers

from .conftest import make_layer_tree, needs_root


def _publish(store: LayerStore, key: str, tree: Path, **kw):
    with store.lock(key):
        return store.publish(key, tree, log=f"log of {key}\n", **kw)


def test_publish_writes_blob_manifest_and_log(layer_tree, tmp_path):
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    m = _publish(store, "env-a", layer_tree, kind="env", meta={"x": 1})
    assert store.get("env-a") == m
    blob = store.blob_path(m)
    assert blob == tmp_path / "store" / "blobs" / m.sha256[:2] / f"{m.sha256}.tar.zst"
    assert sha256_file(blob) == m.sha256 and blob.stat().st_size == m.size
    assert (tmp_path / "store" / m.build_log).read_text() == "log of env-a\n"
    assert json.loads((tmp_path / "store" / "manifests" / "env-a.json").read_text())["meta"] == {"x": 1}
    assert [x.key for x in store.ls()] == ["env-a"]
    assert list((tmp_path / "store" / "tmp").iterdir()) == []
    assert store.verify() == []


def test_byte_flip_is_found_by_verify_and_removed(layer_tree, tmp_path):
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    m = _publish(store, "env-a", layer_tree)
    blob = store.blob_path(m)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    assert store.verify() == [("env-a", f"{blob} sha256 differs from the manifest")]
    blob.write_bytes(bytes(data[:-10]))
    assert "has" in store.verify()[0][1]
    store.verify(remove_bad=True)
    assert store.ls() == [] and not blob.exists()
    with pytest.raises(KeyError, match="never built"):
        store.require("env-a")


def test_failed_build_is_recorded_and_not_retried_until_forced(layer_tree, tmp_path):
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    calls = []

    def failing(publish):
        calls.append(1)
        raise BuildFailure("pip install failed (exit 1)", log="line\n" * 50 + "ERROR: no such package\n")

    with pytest.raises(BuildFailure):
        store.build("env-bad", failing)
    with pytest.raises(LayerBuildFailed, match="(?s)pip install failed.*ERROR: no such package.*--force"):
        store.build("env-bad", failing)
    assert len(calls) == 1
    assert store.failure("env-bad")["log_tail"].count("\n") == 39  # the last 40 lines
    m = store.build("env-bad", lambda publish: publish(layer_dir=layer_tree, kind="env"), force=True)
    assert store.get("env-bad") == m and store.failure("env-bad") is None


_BUILDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from swebox.envs.cache.store import LayerStore
    store, tree, counter = LayerStore(sys.argv[1], fmt="tar.zst"), sys.argv[2], Path(sys.argv[3])
    def build(publish):
        with open(counter, "a") as f:
            f.write("built\\n")
        time.sleep(1.0)  # long enough for the other process to be waiting on the lock
        return publish(layer_dir=tree, kind="env")
    print(store.build("env-same", build).sha256)
""")


def test_two_processes_building_one_key_build_once(layer_tree, tmp_path):
    counter = tmp_path / "counter"
    args = [sys.executable, "-c", _BUILDER, str(tmp_path / "store"), str(layer_tree), str(counter)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert counter.read_text() == "built\n"
    assert outs[0] == outs[1] and len(outs[0]) == 64


_KILLED = textwrap.dedent("""
    import os, sys, time
    from swebox.envs.cache import store as store_mod
    stop_at = int(sys.argv[3])
    real_rename, calls = os.rename, []
    def slow_rename(a, b):
        calls.append(1)
        if len(calls) == stop_at:
            print("at", a, flush=True)
            time.sleep(60)
        real_rename(a, b)
    store_mod.os.rename = slow_rename
    store = store_mod.LayerStore(sys.argv[1], fmt="tar.zst")
    store.build("env-k", lambda publish: publish(layer_dir=sys.argv[2], kind="env", log="log"))
""")


@pytest.mark.parametrize("stop_at", [1, 2, 3])  # 1: blob rename, 2: log rename, 3: manifest rename
def test_sigkill_during_publish_leaves_only_complete_layers(layer_tree, tmp_path, stop_at):
    root = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(root), str(layer_tree), str(stop_at)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().startswith("at ")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = LayerStore(root, fmt="tar.zst")
    assert store.ls() == [] and store.get("env-k") is None and store.failure("env-k") is None
    old = time.time() - 3600
    for blob in (root / "blobs").glob("*/*"):
        os.utime(blob, (old, old))  # pretend the grace period for unreferenced blobs is over
    store.gc(keep_bytes=10**12)
    assert list((root / "tmp").iterdir()) == [] and list((root / "blobs").glob("*/*")) == []
    m = store.build("env-k", lambda publish: publish(layer_dir=layer_tree, kind="env"))
    assert store.verify() == [] and store.get("env-k") == m


@needs_root
def test_disk_full_during_build_publishes_nothing(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        tree = make_layer_tree(tmp_path / "big", payload=os.urandom(3_000_000))  # incompressible
        store = LayerStore(small / "store", fmt="tar.zst")
        with pytest.raises(OSError, match="disk full while publishing layer env-full"):
            store.build("env-full", lambda publish: publish(layer_dir=tree, kind="env"))
        assert store.ls() == [] and store.failure("env-full") is None
        assert list((small / "store" / "tmp").iterdir()) == []
        assert list((small / "store" / "blobs").glob("*/*")) == []
        small_tree = make_layer_tree(tmp_path / "small-tree")
        assert store.build("env-ok", lambda publish: publish(layer_dir=small_tree)).key == "env-ok"
        assert store.verify() == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_gc_evicts_least_recently_used(tmp_path):
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    sizes = {}
    for i, key in enumerate(["env-a", "env-b", "env-c"]):
        tree = make_layer_tree(tmp_path / key, payload=os.urandom(20_000 + i))
        sizes[key] = _publish(store, key, tree).size
        t = 1_000_000 + i
        os.utime(tmp_path / "store" / "manifests" / f"{key}.json", (t, t))
    store.touch("env-a")  # now the most recent
    removed = store.gc(keep_bytes=sizes["env-a"] + sizes["env-c"])
    assert removed == ["env-b"]
    assert sorted(m.key for m in store.ls()) == ["env-a", "env-c"]
    assert store.gc(keep_bytes=0, protect=["env-a"]) == ["env-c"]


def test_gc_keeps_the_toolchain_layers_of_stored_envs(tmp_path):
    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    for key in ("toolchain-go-1", "toolchain-node-2"):
        with store.lock(key):
            store.publish(key, make_layer_tree(tmp_path / key), kind="toolchain")
    with store.lock("env-go"):
        store.publish(
            "env-go", make_layer_tree(tmp_path / "env-go"), kind="env", meta={"toolchains": {"go": "toolchain-go-1"}}
        )
    assert store.toolchain_layers() == {"toolchain-go-1"}
    assert sorted(store.gc(keep_bytes=0)) == ["env-go", "toolchain-node-2"]  # the env goes, its toolchain stays
    assert [m.key for m in store.ls()] == ["toolchain-go-1"]
    assert store.gc(keep_bytes=0) == ["toolchain-go-1"]  # no stored env names it any more


def test_export_import_copies_and_checks(layer_tree, tmp_path):
    src = LayerStore(tmp_path / "src", fmt="tar.zst")
    m = _publish(src, "env-a", layer_tree)
    dst = LayerStore(tmp_path / "dst", fmt="squashfs")
    assert copy_layers(src, dst) == [m]
    assert dst.get("env-a") == m and dst.verify() == []
    assert (tmp_path / "dst" / m.build_log).read_text() == "log of env-a\n"
    assert copy_layers(src, dst) == []  # already there
    blob = src.blob_path(m)
    blob.write_bytes(blob.read_bytes()[:-1] + b"\0")
    other = LayerStore(tmp_path / "other")
    with pytest.raises(LayerCorruptError, match=str(blob)):
        copy_layers(src, other)
    assert other.ls() == [] and list((tmp_path / "other" / "tmp").iterdir()) == []


def test_env_toolchains_reads_the_manifest_and_names_a_missing_layer(tmp_path):
    from swebox.envs.cache.toolchains import ToolchainMissing, env_toolchains

    store = LayerStore(tmp_path / "store", fmt="tar.zst")
    with store.lock("env-plain"):
        store.publish("env-plain", make_layer_tree(tmp_path / "plain"), kind="env")
    with store.lock("env-node"):
        store.publish(
            "env-node",
            make_layer_tree(tmp_path / "env-node"),
            kind="env",
            meta={"toolchains": {"node": "toolchain-node-1"}},
        )
    assert env_toolchains(store, "env-plain").layers == {} and env_toolchains(store, "env-absent").layers == {}
    with pytest.raises(ToolchainMissing, match="toolchain build node"):  # what every sandbox over it would lack
        env_toolchains(store, "env-node")
    with store.lock("toolchain-node-1"):
        store.publish("toolchain-node-1", make_layer_tree(tmp_path / "node"), kind="toolchain")
    under = env_toolchains(store, "env-node")
    assert under.toolchains == under.layers == {"node": "toolchain-node-1"} and under.interpreter == {}
    # an interpreter layer under the env is the one its manifest's python_layer names, below the toolchains
    with store.lock("python-3.9.18-x"):
        store.publish("python-3.9.18-x", make_layer_tree(tmp_path / "python"), kind="python")
    with store.lock("env-py"):
        tools = {"python3.9": "python-3.9.18-x", "node": "toolchain-node-1"}
        meta = {"python_layer": "python-3.9.18-x", "toolchains": tools}
        store.publish("env-py", make_layer_tree(tmp_path / "env-py"), kind="env", meta=meta)
    under = env_toolchains(store, "env-py")
    assert under.interpreter == {"python3.9": "python-3.9.18-x"} and under.toolchains == {"node": "toolchain-node-1"}
    assert list(under.layers.items()) == list(tools.items())
    # a missing interpreter layer is imported, not built: the message says so, not `toolchain build python3.9`
    with store.lock("env-py-gone"):
        meta = {"python_layer": "python-3.9.18-gone", "toolchains": {"python3.9": "python-3.9.18-gone"}}
        store.publish("env-py-gone", make_layer_tree(tmp_path / "env-py-gone"), kind="env", meta=meta)
    with pytest.raises(
        ToolchainMissing, match=r"(?s)interpreter layer .* python import ~/.pyenv/versions/3\.9\.N"
    ) as err:
        env_toolchains(store, "env-py-gone")
    assert "toolchain build" not in str(err.value)
