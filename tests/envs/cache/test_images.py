"""Images without a container runtime: OCI layouts and docker-save tarballs converted into store layers, run
in a real sandbox, compared file by file with ``umoci unpack --rootless`` of the same image; unsafe layers,
wrong digests, other architectures and a full disk refused with nothing published."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import (
    ImageSourceError,
    LayerDigestError,
    Platform,
    acquire_image,
    docker_archive,
    get_image,
    import_image,
    list_images,
    oci_layout,
    remove_image,
)
from swebox.envs.cache.packing import UnsafeArchiveError
from swebox.envs.sandbox import Sandbox

from .oci_fixture import build_test_image, d, f, hard, layer_tar, sym, write_layout

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("tar2sqfs", "skopeo", "umoci", "squashfuse")) or os.geteuid() != 0,
    reason="needs root and tar2sqfs, skopeo, umoci, squashfuse (apt-get install squashfs-tools-ng skopeo umoci)",
)
AMD64 = Platform("linux", "amd64")
GENERATED_ETC = {"etc/hostname", "etc/hosts", "etc/nsswitch.conf", "etc/resolv.conf"}
"""The sandbox's skeleton adds these under an image's /etc (the image has none)."""
TOPS = ("bin", "lib", "lib64", "usr", "etc", "data", "opt", "home", "root")


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    return build_test_image(tmp_path_factory.mktemp("image") / "layout")


@pytest.fixture
def store(tmp_path) -> LayerStore:
    return LayerStore(tmp_path / "store")


def _sandbox_view(sb: Sandbox) -> dict[str, tuple]:
    """path -> (type, mode, size, link target, sha256 or '', inode, nlink), as find in the sandbox sees it."""
    out = sb.exec(
        f"cd / && find {' '.join(TOPS)} -printf '%y\\t%m\\t%s\\t%i\\t%n\\t%p\\t%l\\n'; "
        f"find {' '.join(TOPS)} -type f -exec sha256sum {{}} +",
        timeout=60,
    )
    assert out.exit_code == 0, out.output
    view, sums = {}, {}
    for line in out.output.splitlines():
        if "\t" in line:
            kind, mode, size, ino, nlink, path, link = line.split("\t")
            view[path] = (kind, int(mode, 8), int(size) if kind == "f" else 0, link, ino, int(nlink))
        else:
            digest, path = line.split("  ", 1)
            sums[path] = digest
    return {p: (k, m, s, link, sums.get(p, ""), ino, n) for p, (k, m, s, link, ino, n) in view.items()}


def _host_view(root: Path) -> dict[str, tuple]:
    view = {}
    for top in TOPS:
        base = root / top
        paths = [base] if base.is_symlink() or not base.is_dir() else [base, *sorted(base.rglob("*"))]
        for p in paths:
            if not os.path.lexists(p):
                continue
            st = os.lstat(p)
            kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "f"
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if kind == "f" else ""
            view[str(p.relative_to(root))] = (
                kind,
                stat.S_IMODE(st.st_mode),
                st.st_size if kind == "f" else 0,
                os.readlink(p) if kind == "l" else "",
                digest,
                str(st.st_ino),
                st.st_nlink,
            )
    return view


def _links(view: dict[str, tuple]) -> set[frozenset[str]]:
    groups: dict[str, set[str]] = {}
    for path, entry in view.items():
        if entry[0] == "f" and entry[6] > 1:
            groups.setdefault(entry[5], set()).add(path)
    return {frozenset(g) for g in groups.values()}


def test_sandbox_view_matches_umoci_unpack(image, store, tmp_path):
    record = import_image(store, oci_layout(image, "latest", AMD64), "test/image:latest", str(AMD64))
    assert len(record.layers) == 3 and record.config["WorkingDir"] == "/data"
    bundle = tmp_path / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--rootless", "--image", f"{image}:latest", str(bundle)], check=True, capture_output=True
    )
    want = _host_view(bundle / "rootfs")
    cache = LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node")))
    try:
        with acquire_image(cache, "test/image:latest") as held, Sandbox(held.paths, held.policy) as sb:
            env = sb.exec(
                "pwd; echo $FROM_BASHRC $IMAGE_VAR ${BASH_ENV:-unset}; stat -c '%U %u' "
                "/home/user/mine.txt; bash -c 'echo child ${FROM_BASHRC:-} ${BASH_ENV:-no-bash-env}'"
            )
            got = {p: e for p, e in _sandbox_view(sb).items() if p not in GENERATED_ETC}
            sb.exec("rm /data/linked.txt && echo changed > /etc/conf.d/c.conf")
            sb.reset()
            after_reset = sb.exec("cat /data/linked.txt /etc/conf.d/c.conf; pwd; echo $FROM_BASHRC").output
    finally:
        cache.close()
    assert sorted(got) == sorted(want)
    suid = "usr/local/bin/suid"
    assert want[suid][1] & stat.S_ISUID and not got[suid][1] & stat.S_ISUID  # the converter drops setuid
    strip = {suid: want[suid][1] & ~stat.S_ISUID}
    for path in set(want) - {"data/up"}:  # data/up: checked below (clamped on purpose)
        mode = strip.get(path, want[path][1])
        assert got[path][:5] == (want[path][0], mode, *want[path][2:5]), path
    assert _links(got) == _links(want) == {frozenset({"data/hard.txt", "data/linked.txt"})}
    assert "data/old.txt" not in got and "opt/keep" not in got  # whiteouts of a file and of a folder
    assert sorted(p for p in got if p.startswith("etc/conf.d/")) == ["etc/conf.d/c.conf"]  # opaque
    assert got["data/abs"][3] == "/etc/conf.d/c.conf"
    assert want["data/up"][3] == "../../../etc/passwd" and got["data/up"][3] == "/etc/passwd"  # clamped
    lines = env.output.splitlines()
    assert lines[:3] == ["/data", "activated from-config unset", "user 1000"], env.output
    assert lines[3] == "child activated no-bash-env"  # inherited env, .bashrc not sourced again
    assert after_reset.splitlines() == ["the hard link's target", "c", "/data", "activated"]


def test_docker_archive_and_zstd_layers_share_the_stored_layers(image, store, tmp_path):
    tarball = tmp_path / "image.tar"
    subprocess.run(
        ["skopeo", "copy", "--quiet", f"oci:{image}:latest", f"docker-archive:{tarball}:test/image:v1"],
        check=True,
        capture_output=True,
    )
    zstd = build_test_image(tmp_path / "zstd", compression="zstd")
    first = import_image(store, oci_layout(image, "latest"), "gzip", "linux/amd64")
    blobs = {m.sha256 for m in store.ls()}
    second = import_image(store, docker_archive(tarball, "test/image:v1"), "archive", "linux/amd64")
    third = import_image(store, oci_layout(zstd), "zstd", "linux/amd64")
    assert first.layers == second.layers == third.layers  # keyed by diff_id: however compressed, stored once
    assert {m.sha256 for m in store.ls()} == blobs
    again = LayerStore(tmp_path / "again")
    import_image(again, docker_archive(tarball), "archive", "linux/amd64")
    assert [again.get(k).sha256 for k in first.layers] == [store.get(k).sha256 for k in first.layers]  # same bytes
    assert second.source == "docker-archive" and second.config == first.config
    assert [r.ref for r in list_images(store)] == ["archive", "gzip", "zstd"]
    with pytest.raises(ImageSourceError, match="tags: docker.io/test/image:v1"):
        docker_archive(tarball, "other:tag")


def test_gc_keeps_the_layers_of_recorded_images(image, store):
    record = import_image(store, oci_layout(image), "keep:me", "linux/amd64")
    (store.root / "downloads" / "interrupted" / "blobs").mkdir(parents=True)  # a pull that died midway
    with store.lock("live"):
        (store.root / "downloads" / "live").mkdir()
        assert store.gc(keep_bytes=0) == []  # every layer belongs to an image
    assert [p.name for p in (store.root / "downloads").iterdir()] == ["live"]
    assert all(store.get(k) for k in record.stack())
    assert remove_image(store, "keep:me") and get_image(store, "keep:me") is None
    import threading

    removed: list[str] = []
    with store.images_lock():  # an import in progress: its layers have no record yet, so gc must wait
        sweeper = threading.Thread(target=lambda: removed.extend(store.gc(keep_bytes=0)))
        sweeper.start()
        sweeper.join(timeout=1.0)
        assert sweeper.is_alive() and removed == []
    sweeper.join(timeout=30)
    assert sorted(removed) == sorted(record.stack())


def test_platform_selection_and_other_arch_only(store, tmp_path):
    layers = [layer_tar([d("data"), f("data/x", "x")])]
    multi = write_layout(tmp_path / "multi", layers, "multi", arch="arm64", extra_arches=("amd64",))
    assert import_image(store, oci_layout(multi, "multi", AMD64), "multi", "linux/amd64").layers
    only_arm = write_layout(tmp_path / "arm", layers, "arm", arch="arm64", extra_arches=("s390x",))
    with pytest.raises(
        ImageSourceError,
        match=r"no image for platform linux/amd64; the index has "
        r"linux/arm64, linux/s390x",
    ):
        oci_layout(only_arm, "arm", AMD64)
    single_arm = write_layout(tmp_path / "single", layers, "one", arch="arm64")
    with pytest.raises(ImageSourceError, match="is for linux/arm64, not linux/amd64; pass --platform"):
        oci_layout(single_arm, "one", AMD64)


def _nothing_published(store: LayerStore) -> None:
    assert store.ls() == [] and list(store.root.glob("blobs/*/*")) == [] and list_images(store) == []
    assert list((store.root / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    "entries, why",
    [
        ([d("etc"), f("etc/../../escape", "x")], "'..' in path"),
        ([d("data"), hard("data/h", "etc/passwd")], "hard link 'data/h' -> 'etc/passwd': the target is not"),
        ([d("data"), f("data/t", "t"), sym("data/s", "/etc"), hard("data/h", "data/s")], "hard link 'data/h'"),
        ([sym("lib", "usr/lib"), f("lib/evil.so", "x")], "'lib/evil.so' lies under the symlink 'lib'"),
        ([sym("up", "/etc"), f("up/.wh.passwd", "")], "'up/passwd' lies under the symlink 'up'"),
    ],
)
def test_unsafe_layers_are_refused(store, tmp_path, entries, why):
    layout = write_layout(tmp_path / "bad", [layer_tar(entries)])
    with pytest.raises(UnsafeArchiveError, match=why):
        import_image(store, oci_layout(layout), "bad", "linux/amd64")
    _nothing_published(store)


def test_devices_and_fifos_are_dropped(store, tmp_path):
    import tarfile

    dev = tarfile.TarInfo("dev/null")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    fake_whiteout = tarfile.TarInfo("dev/zero-zero")
    fake_whiteout.type = tarfile.CHRTYPE  # a raw 0:0 device would act as an overlay whiteout: dropped too
    fifo = tarfile.TarInfo("dev/fifo")
    fifo.type = tarfile.FIFOTYPE
    layout = write_layout(
        tmp_path / "dev", [layer_tar([d("dev"), (dev, b""), (fake_whiteout, b""), (fifo, b""), f("dev/keep", "k")])]
    )
    record = import_image(store, oci_layout(layout), "dev", "linux/amd64")
    manifest = store.get(record.layers[0])
    assert manifest.meta["dropped"] == {"device": 2, "fifo": 1} and manifest.meta["whiteouts"] == 0
    listing = subprocess.run(
        ["unsquashfs", "-lln", str(store.blob_path(manifest))], capture_output=True, text=True, check=True
    ).stdout
    assert "squashfs-root/dev/keep" in listing and "null" not in listing and "fifo" not in listing


def test_wrong_digest_is_refused(image, store, tmp_path):
    layout = tmp_path / "corrupt"
    shutil.copytree(image, layout)
    manifest = json.loads(
        (
            layout
            / "blobs/sha256"
            / json.loads((layout / "index.json").read_text())["manifests"][0]["digest"].split(":")[1]
        ).read_text()
    )
    blob = layout / "blobs/sha256" / manifest["layers"][1]["digest"].split(":")[1]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(LayerDigestError, match="corrupt"):
        import_image(store, oci_layout(layout), "corrupt", "linux/amd64")
    assert get_image(store, "corrupt") is None
    assert all(m.meta["diff_id"] != manifest["layers"][1]["digest"] for m in store.ls())
    assert list((store.root / "tmp").iterdir()) == []


@pytest.mark.parametrize("size", ["3m", "7500k"], ids=["while-decompressing", "while-packing"])
def test_disk_full_publishes_nothing(image, tmp_path, size):
    # the base layer is a 6.0 MB tar that packs into 2.9 MB: 3 MB fills up while it is decompressed into
    # tmp/, 7.5 MB once it is there and tar2sqfs writes the squashfs next to it
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(small)], check=True)
    try:
        store = LayerStore(small / "store")
        with pytest.raises(OSError) as caught:
            import_image(store, oci_layout(image), "big", "linux/amd64")
        assert caught.value.errno == errno.ENOSPC and "disk full" in str(caught.value)
        assert get_image(store, "big") is None and list((store.root / "tmp").iterdir()) == []
        for m in store.ls():  # layers published before the disk filled are complete
            assert store.verify([m.key]) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_cli_pull_ls_build_rm_image_gc(image, tmp_path, capsys):
    from .test_cli import swebox

    store = str(tmp_path / "store")
    tarball = tmp_path / "image.tar"
    subprocess.run(
        ["skopeo", "copy", "--quiet", f"oci:{image}:latest", f"docker-archive:{tarball}:test/image:v1"],
        check=True,
        capture_output=True,
    )
    assert swebox("cache", "--store", store, "pull", f"oci:{image}:latest", "--as", "from-layout") == 0
    assert "from-layout: 3 layers" in capsys.readouterr().out
    archived = f"docker-archive:{tarball}:test/image:v1"
    rows = [
        {"instance_id": "a", "repo": "r", "FAIL_TO_PASS": ["t::x"], "metadata": {"image": archived}},
        {"instance_id": "b", "repo": "r", "FAIL_TO_PASS": ["t::x"], "metadata": {"image_name": archived}},
    ]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert swebox("cache", "--store", store, "build", "--tasks", str(tasks), "--env-source", "image") == 0
    assert "1 images for 2 of the rows: 0 failed" in capsys.readouterr().out
    assert swebox("cache", "--store", store, "ls") == 0
    out = capsys.readouterr().out
    assert "2 images, 3 distinct layers (3 shared)" in out and "image-layer" in out
    assert archived in out
    assert swebox("cache", "--store", store, "gc", "--keep-gb", "0") == 0
    assert "removed 0 layers" in capsys.readouterr().out
    assert swebox("cache", "--store", store, "rm-image", "from-layout", archived) == 0
    assert swebox("cache", "--store", store, "gc", "--keep-gb", "0") == 0
    assert "removed 4 layers" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="rows name no image"):
        tasks.write_text(json.dumps({"instance_id": "c", "repo": "r", "FAIL_TO_PASS": ["t::x"]}) + "\n")
        swebox("cache", "--store", store, "build", "--tasks", str(tasks), "--env-source", "image")


def test_cli_build_auto_reports_an_unavailable_image_without_a_recipe(tmp_path, capsys):
    from .test_cli import swebox

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps(
            {
                "instance_id": "a",
                "repo": "r",
                "FAIL_TO_PASS": ["t::x"],
                "metadata": {"image": f"oci:{tmp_path}/no-such-layout:latest"},
            }
        )
        + "\n"
    )
    assert swebox("cache", "--store", str(tmp_path / "store"), "build", "--tasks", str(tasks)) == 1
    out, err = capsys.readouterr()
    assert "1 images for 0 of the rows: 1 failed" in out
    assert "expected an OCI image layout" in err and "have no env recipe" in err


def test_image_policy_from_the_config():
    from swebox.envs.cache.images import ImageConfigError, ImageRecord, image_policy
    from swebox.envs.sandbox import SandboxPolicy

    record = ImageRecord(
        ref="r",
        digest="sha256:0",
        platform="linux/amd64",
        layers=[],
        runtime_layer="rt",
        config={"Env": ["PATH=/opt/conda/bin:/usr/bin", "A=b=c"], "WorkingDir": "/testbed"},
    )
    policy = image_policy(record, SandboxPolicy(memory_mb=1234))
    assert (policy.memory_mb, policy.workdir, policy.system_paths, policy.etc_files) == (1234, "/testbed", (), ())
    assert policy.env["PATH"] == "/opt/conda/bin:/usr/bin" and policy.env["A"] == "b=c"
    assert policy.env["HOME"] == "/root" and "LC_ALL" not in policy.env and not policy.auto_bind_interpreters
    record.config["User"] = "1000:1000"
    with pytest.raises(ImageConfigError, match="runs as user '1000:1000'.*ignore_user=True"):
        image_policy(record)
    assert image_policy(record, ignore_user=True).workdir == "/testbed"


def test_layer_resolver_runs_a_task_in_the_image_its_row_names(image, tmp_path):
    from swebox.envs.episodes.episode import EpisodeConfig
    from swebox.envs.episodes.layers_resolver import (
        LayersMissing,
        LayerSource,
        acquire_layers,
        close_shared_caches,
    )
    from swebox.envs.tasks.schema import Task

    store = LayerStore(tmp_path / "store")
    task = Task(instance_id="t", repo="r", FAIL_TO_PASS=["t::x"], metadata={"image": "test/image:1"})
    source = LayerSource(store=str(store.root), cache_root=str(tmp_path / "node"))
    missing = "(?s)its image test/image:1 is not in the layer store .*swebox cache pull test/image:1 --store"
    with pytest.raises(LayersMissing, match=missing):
        acquire_layers(task, source)
    import_image(store, oci_layout(image), "test/image:1", "linux/amd64")
    try:
        with acquire_layers(task, source) as held:
            assert len(held.paths) == 4 and held.sandbox["workdir"] == "/data"  # 3 layers + the runtime layer
            config = held.configure(EpisodeConfig(sandbox={"memory_mb": 1000}))
            assert config.sandbox["memory_mb"] == 1000 and config.sandbox["system_paths"] == []
            assert config.policy().env["IMAGE_VAR"] == "from-config"
    finally:
        close_shared_caches()
