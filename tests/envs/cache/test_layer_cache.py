from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from swebox.envs.cache.layer_cache import LayerCache, LayerCacheConfig, QuotaError, node_key
from swebox.envs.cache.store import LayerCorruptError, LayerStore

from .conftest import IS_ROOT, make_layer_tree, needs_root, needs_squashfs

FORMATS = [pytest.param("squashfs", marks=[needs_root, needs_squashfs]), "tar.zst", "tar.gz"]


def _store_with(tmp_path: Path, fmt: str, keys: list[str], payload: int = 0) -> LayerStore:
    store = LayerStore(tmp_path / "store", fmt=fmt)
    for key in keys:
        tree = make_layer_tree(tmp_path / "trees" / key, payload=os.urandom(payload))
        (tree / "testbed" / "which.txt").write_text(key)
        with store.lock(key):
            store.publish(key, tree)
    return store


def _cache(tmp_path: Path, store: LayerStore, quota_gb: float = 1.0, **kw) -> LayerCache:
    return LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node"), quota_gb=quota_gb), **kw)


@pytest.mark.parametrize("fmt", FORMATS)
def test_acquire_materialises_once_and_shows_the_tree(tmp_path, fmt):
    store = _store_with(tmp_path, fmt, ["env-a"])
    with _cache(tmp_path, store) as cache:
        h = cache.acquire("env-a")
        assert (h.path / "testbed" / "which.txt").read_text() == "env-a"
        assert os.getxattr(h.path / "testbed" / "opaque", "user.overlay.opaque") == b"y"
        if IS_ROOT:
            assert os.lstat(h.path / "testbed" / "deleted.py").st_rdev == os.makedev(0, 0)
        assert os.path.ismount(h.path) == (fmt == "squashfs")
        inode = os.stat(h.path / "testbed" / "which.txt").st_ino
        t0 = time.perf_counter()
        h2 = cache.acquire("env-a")
        assert time.perf_counter() - t0 < 0.05  # warm: nothing copied or unpacked
        assert h2.path == h.path and os.stat(h2.path / "testbed" / "which.txt").st_ino == inode
        state = cache.materialised()[0]
        assert state["status"] == "ready" and state["sha256"] == store.get("env-a").sha256
        h.release()
        h2.release()
    assert not os.path.ismount(tmp_path / "node" / "layers" / node_key(store.get("env-a")))  # close unmounts


@pytest.mark.parametrize("fmt", FORMATS)
def test_corrupt_stored_layer_is_rejected_named_and_removed(tmp_path, fmt):
    store = _store_with(tmp_path, fmt, ["env-a"])
    blob = store.blob_path(store.get("env-a"))
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    with _cache(tmp_path, store) as cache:
        with pytest.raises(LayerCorruptError, match=f"stored file {blob} is corrupt"):
            cache.acquire("env-a")
        assert store.get("env-a") is None and not blob.exists()
        assert cache.materialised() == []
        assert list((tmp_path / "node" / "layers").iterdir()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_corrupt_stored_layer_is_rebuilt_when_a_rebuild_is_given(tmp_path, fmt):
    store = _store_with(tmp_path, fmt, ["env-a"])
    blob = store.blob_path(store.get("env-a"))
    blob.write_bytes(blob.read_bytes()[:-50])  # truncated
    rebuilt = []

    def rebuild(key):
        rebuilt.append(key)
        tree = make_layer_tree(tmp_path / "rebuilt")
        (tree / "testbed" / "which.txt").write_text("rebuilt")
        with store.lock(key):
            return store.publish(key, tree)

    with _cache(tmp_path, store, rebuild=rebuild) as cache, cache.acquire("env-a") as h:
        assert rebuilt == ["env-a"]
        assert (h.path / "testbed" / "which.txt").read_text() == "rebuilt"


@needs_root
@needs_squashfs
def test_corrupt_node_copy_is_refetched(tmp_path):
    store = _store_with(tmp_path, "squashfs", ["env-a"])
    with _cache(tmp_path, store) as cache:
        cache.acquire("env-a").release()
    local = tmp_path / "node" / "blobs" / f"{node_key(store.get('env-a'))}.squashfs"  # unmounted; the copy stays
    data = bytearray(local.read_bytes())
    data[200] ^= 0x01
    local.write_bytes(bytes(data))
    with _cache(tmp_path, store) as cache, cache.acquire("env-a") as h:
        assert (h.path / "testbed" / "which.txt").read_text() == "env-a"
        assert local.read_bytes() == store.blob_path(store.get("env-a")).read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_quota_evicts_least_recently_used_unused_layers(tmp_path, fmt):
    store = _store_with(tmp_path, fmt, ["env-a", "env-b", "env-c"], payload=400_000)
    one = store.get("env-a").size if fmt == "squashfs" else store.get("env-a").tree_bytes
    quota = (2.5 * one) / 1e9  # room for two layers, not three
    with _cache(tmp_path, store, quota_gb=quota) as cache:
        cache.acquire("env-a").release()
        held = cache.acquire("env-b")
        cache.acquire("env-c").release()  # evicts env-a: least recently used and unused
        assert sorted(s["key"] for s in cache.materialised()) == ["env-b", "env-c"]
        assert not (tmp_path / "node" / "layers" / node_key(store.get("env-a"))).exists()
        with cache.acquire("env-a"):  # evicts env-c, never env-b (held)
            assert sorted(s["key"] for s in cache.materialised()) == ["env-a", "env-b"]
            with pytest.raises(QuotaError, match="layer env-c needs"):
                cache.acquire("env-c")  # both materialised layers are in use
        assert (held.path / "testbed" / "which.txt").read_text() == "env-b"
        held.release()


class ForgetsDuringListing(LayerCache):
    """Another process drops a stale layer (under that key's lock only) just after this one listed the states:
    the window the demo hit when two stores shared a node cache and a key."""

    def materialised(self):
        states = super().materialised()
        victim = self.root / "state" / f"{node_key(self.store.get('env-a'))}.json"
        if victim.exists() and any(s["key"] == "env-a" for s in states):
            victim.unlink()
        return states


def test_eviction_survives_a_state_removed_by_another_process(tmp_path):
    store = _store_with(tmp_path, "tar.zst", ["env-a", "env-b", "env-c"], payload=400_000)
    quota = 2.5 * store.get("env-a").tree_bytes / 1e9  # room for two layers, not three
    config = LayerCacheConfig(root=str(tmp_path / "node"), quota_gb=quota)
    with ForgetsDuringListing(store, config) as cache:
        cache.acquire("env-a").release()
        cache.acquire("env-b").release()
        with cache.acquire("env-c") as h:  # must evict; env-a's record vanishes mid-way
            assert (h.path / "testbed" / "which.txt").read_text() == "env-c"
        assert "env-c" in [s["key"] for s in cache.materialised()]


_HOLDER = textwrap.dedent("""
    import sys, time
    from swebox.envs.cache.layer_cache import LayerCache, LayerCacheConfig
    from swebox.envs.cache.store import LayerStore
    cache = LayerCache(LayerStore(sys.argv[1], fmt="tar.zst"), LayerCacheConfig(root=sys.argv[2]))
    h = cache.acquire("env-a")
    print("held", flush=True)
    time.sleep(60)
""")


def test_a_layer_used_by_another_process_is_not_evicted(tmp_path):
    store = _store_with(tmp_path, "tar.zst", ["env-a", "env-b"])
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(store.root), str(tmp_path / "node")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "held\n"
        with _cache(tmp_path, store, quota_gb=store.get("env-a").tree_bytes * 1.5 / 1e9) as cache:
            assert cache.evict("env-a") is False
            with pytest.raises(QuotaError):
                cache.acquire("env-b")
            proc.kill()
            proc.wait()
            with cache.acquire("env-b") as h:  # the dead holder's lock went with it
                assert (h.path / "testbed" / "which.txt").read_text() == "env-b"
            assert [s["key"] for s in cache.materialised()] == ["env-b"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_stores_with_different_builds_of_one_key_share_a_node_cache(tmp_path, fmt):
    """Two runs (stores) built env-a differently; both use one node cache at once and neither breaks the other
    (was: "layer env-a on this node is stale (the store rebuilt it) but still in use" for every episode)."""
    first = _store_with(tmp_path / "one", fmt, ["env-a"], payload=1000)
    second = _store_with(tmp_path / "two", fmt, ["env-a"], payload=1000)
    assert first.get("env-a").sha256 != second.get("env-a").sha256  # different payloads: different builds
    with _cache(tmp_path, first) as one, _cache(tmp_path, second) as two:
        held = one.acquire("env-a")
        with two.acquire("env-a") as other:  # while the first build is in use
            assert other.path != held.path and other.manifest.sha256 == second.get("env-a").sha256
            assert (other.path / "testbed").is_dir() and (held.path / "testbed").is_dir()
        again = one.acquire("env-a")  # the first run goes on with its own build, materialised once
        assert again.path == held.path
        again.release()
        held.release()
        assert sorted(s["node_key"] for s in one.materialised()) == sorted(
            [node_key(first.get("env-a")), node_key(second.get("env-a"))]
        )
        assert one.evict("env-a") and one.materialised() == []  # both builds, neither in use
