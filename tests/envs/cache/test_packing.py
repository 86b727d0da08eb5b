from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from swebox.envs.cache.packing import FORMATS, UnsafeArchiveError, pack, unpack, vet_squashfs, vet_tar

from .conftest import IS_ROOT, needs_root, needs_squashfs

TAR_FORMATS = [f for f in FORMATS if f != "squashfs"]


def _mount_squashfs(image: Path, target: Path) -> None:
    target.mkdir()
    subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(image), str(target)], check=True)


def _check_tree(root: Path, owner: int | None) -> None:
    assert (root / "testbed" / "pkg" / "mod.py").read_text() == "def f():\n    return 1\n"
    assert os.readlink(root / "venv" / "bin" / "python") == "/opt/python/bin/python3.11"
    assert os.readlink(root / "testbed" / "link.py") == "pkg/mod.py"
    assert os.getxattr(root / "testbed" / "opaque", "user.overlay.opaque") == b"y"
    if IS_ROOT:
        st = os.lstat(root / "testbed" / "deleted.py")
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0)
    if owner is not None:
        assert os.lstat(root / "testbed" / "pkg" / "mod.py").st_uid == owner
        assert os.lstat(root / "testbed").st_gid == owner


@pytest.mark.parametrize("fmt", TAR_FORMATS)
def test_tar_roundtrip_keeps_whiteouts_xattrs_links_and_owner(layer_tree, tmp_path, fmt):
    packed = pack(layer_tree, tmp_path / f"l.{fmt}", fmt, owner=100000 if IS_ROOT else None)
    assert packed.size == (tmp_path / f"l.{fmt}").stat().st_size
    # testbed, pkg, mod.py, data.bin, venv, bin, python, link.py, hard.py, opaque, kept.txt (+ deleted.py)
    assert packed.files == 11 + IS_ROOT
    assert packed.tree_bytes == 2 * len("def f():\n    return 1\n") + len("kept")
    entries, _ = unpack(packed.path, tmp_path / "out", fmt)
    assert entries == packed.files + 1  # the archive also holds "./"
    _check_tree(tmp_path / "out", 100000 if IS_ROOT else None)
    out_mod = tmp_path / "out" / "testbed" / "pkg" / "mod.py"
    assert os.stat(out_mod).st_ino == os.stat(tmp_path / "out" / "testbed" / "hard.py").st_ino


@needs_root
@needs_squashfs
def test_squashfs_roundtrip_keeps_whiteouts_xattrs_and_owner(layer_tree, tmp_path):
    packed = pack(layer_tree, tmp_path / "l.squashfs", "squashfs")
    assert vet_squashfs(packed.path) == packed.files
    _mount_squashfs(packed.path, tmp_path / "mnt")
    try:
        _check_tree(tmp_path / "mnt", 100000)
    finally:
        subprocess.run(["umount", str(tmp_path / "mnt")], check=True)


def test_pack_include_keeps_only_named_entries(layer_tree, tmp_path):
    (layer_tree / "tmp").mkdir()
    (layer_tree / "tmp" / "junk").write_text("x")
    packed = pack(layer_tree, tmp_path / "l.tar.zst", "tar.zst", owner=None, include=["testbed"])
    unpack(packed.path, tmp_path / "out", "tar.zst")
    assert sorted(os.listdir(tmp_path / "out")) == ["testbed"]
    with pytest.raises(FileNotFoundError, match=r"\['nope'\] missing"):
        pack(layer_tree, tmp_path / "m.tar.zst", "tar.zst", include=["nope"])


def _evil_tar(tmp_path: Path, members: list[tuple[str, str, str]], fmt: str = "tar.zst") -> Path:
    """Write a tar with (name, type, linkname) members and compress it."""
    raw = tmp_path / "evil.tar"
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, link in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = b"root:x:0:0::/root:/bin/sh\n"
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "sym": tarfile.SYMTYPE,
                "lnk": tarfile.LNKTYPE,
                "dir": tarfile.DIRTYPE,
                "chr": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            info.linkname = link
            if kind == "chr":
                info.devmajor, info.devminor = (int(x) for x in link.split(":"))
                info.linkname = ""
            tar.addfile(info)
    out = tmp_path / f"evil.{fmt}"
    comp = ["zstd", "-q", "-f", str(raw), "-o", str(out)] if fmt == "tar.zst" else ["gzip", "-kf", str(raw)]
    subprocess.run(comp, check=True)
    return out


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("../../etc/passwd", "file", "")], r"'\.\.' in path '\.\./\.\./etc/passwd'"),
        ([("ok/../../../etc/passwd", "file", "")], r"'\.\.' in path"),
        ([("/etc/passwd", "file", "")], "absolute path '/etc/passwd'"),
        ([("testbed", "dir", ""), ("testbed/up", "sym", "../../..")], "points outside the layer"),
        ([("esc", "sym", "/etc"), ("esc/passwd", "file", "")], "lies under the symlink 'esc'"),
        (
            [
                ("a", "sym", "sub/../.."),
            ],
            "points outside the layer",
        ),
        ([("h", "lnk", "../outside")], r"'\.\.' in path"),
        ([("null", "chr", "1:3")], r"device file 'null' \(1:3\)"),
        ([("pipe", "fifo", "")], "special file 'pipe'"),
    ],
)
@pytest.mark.parametrize("fmt", TAR_FORMATS)
def test_unsafe_tar_is_refused_and_nothing_is_extracted(tmp_path, members, message, fmt):
    archive = _evil_tar(tmp_path, members, fmt)
    with pytest.raises(UnsafeArchiveError, match=message) as err:
        unpack(archive, tmp_path / "out", fmt)
    assert str(archive) in str(err.value)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["evil.tar", archive.name])


def test_whiteout_and_inside_links_are_accepted(tmp_path):
    archive = _evil_tar(
        tmp_path,
        [
            ("d", "dir", ""),
            ("d/f", "file", ""),
            ("d/l", "sym", "f"),
            ("abs", "sym", "/usr/bin/python3"),
            ("wh", "chr", "0:0"),
            ("d/h", "lnk", "d/f"),
        ],
    )
    assert vet_tar(archive, "tar.zst")[0] == 6


def test_truncated_archive_is_refused(layer_tree, tmp_path):
    layer_tree.joinpath("testbed", "data.bin").write_bytes(os.urandom(300_000))
    packed = pack(layer_tree, tmp_path / "l.tar.zst", "tar.zst", owner=None)
    data = packed.path.read_bytes()
    packed.path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UnsafeArchiveError, match="corrupt or truncated|not a readable"):
        unpack(packed.path, tmp_path / "out", "tar.zst")
    assert not (tmp_path / "out").exists()


@needs_root
@needs_squashfs
def test_squashfs_with_device_or_escaping_link_is_refused(tmp_path):
    for name, make in [
        ("dev", lambda p: os.mknod(p / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))),
        ("esc", lambda p: (p / "up").symlink_to("../../etc")),
    ]:
        tree = tmp_path / name
        tree.mkdir()
        make(tree)
        image = pack(tree, tmp_path / f"{name}.squashfs", "squashfs").path
        with pytest.raises(UnsafeArchiveError, match=f"refusing image {image}"):
            vet_squashfs(image)
