"""Test images written as real OCI image layouts (then copied with skopeo to registries and docker archives).

The base layer holds bash, find and a few coreutils copied from the host with their shared libraries (so the
sandbox can start its shell in the image) plus files that later layers delete, replace or link to:
layer 2 deletes a file (``.wh.``), replaces a folder (``.wh..wh..opq``), adds a hard link, an absolute
symlink, a relative symlink that climbs above the root and a setuid file; layer 3 deletes a folder and adds
a file owned by uid 1000. Layers are written with Python's tarfile exactly as an image builder writes them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import time
from pathlib import Path

TOOLS = ("bash", "find", "cat", "ls", "id", "sha256sum", "stat", "env")
BASHRC = "export FROM_BASHRC=activated\n"


def _entry(
    name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, data: bytes = b"", link: str = "", uid: int = 0
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.uid, info.gid = kind, mode, link, uid, uid
    info.mtime = 1_700_000_000
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def d(name: str, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes]:
    return _entry(name, tarfile.DIRTYPE, mode)


def f(name: str, data: bytes | str, mode: int = 0o644, uid: int = 0) -> tuple[tarfile.TarInfo, bytes]:
    return _entry(name, data=data.encode() if isinstance(data, str) else data, mode=mode, uid=uid)


def sym(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    return _entry(name, tarfile.SYMTYPE, 0o777, link=target)


def hard(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    return _entry(name, tarfile.LNKTYPE, link=target)


def layer_tar(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"(/\S+) \(0x", out)


def base_entries() -> list:
    """A tiny root filesystem that can run bash: host binaries and their libraries at merged-/usr paths."""
    files: dict[str, str] = {}
    for tool in TOOLS:
        binary = f"/usr/bin/{tool}"
        files[binary] = binary
        for lib in _libraries(binary):
            files[os.path.join(os.path.realpath(os.path.dirname(lib)), os.path.basename(lib))] = lib
    entries = [
        d("usr"),
        d("usr/bin"),
        d("usr/lib"),
        d("usr/lib64"),
        sym("bin", "usr/bin"),
        sym("lib", "usr/lib"),
        sym("lib64", "usr/lib64"),
        d("etc"),
        d("root", 0o700),
        d("tmp", 0o1777),
        d("data"),
        d("etc/conf.d"),
        d("opt"),
        d("opt/keep"),
        d("usr/local"),
        d("usr/local/bin"),
    ]
    folders = sorted({os.path.dirname(p).lstrip("/") for p in files})
    entries += [d(p) for p in folders if p not in ("usr/bin", "usr/lib64")]
    for path, source in sorted(files.items()):
        entries.append(f(path.lstrip("/"), Path(os.path.realpath(source)).read_bytes(), 0o755))
    entries += [
        f("etc/passwd", "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"),
        f("etc/group", "root:x:0:\nuser:x:1000:\n"),
        f("root/.bashrc", BASHRC),
        f("data/old.txt", "to be deleted\n"),
        f("etc/conf.d/a.conf", "a\n"),
        f("etc/conf.d/b.conf", "b\n"),
        f("opt/keep/x", "x\n"),
    ]
    return entries


def layer2_entries() -> list:
    return [
        d("data"),
        f("data/.wh.old.txt", ""),
        f("data/linked.txt", "the hard link's target\n"),
        hard("data/hard.txt", "data/linked.txt"),
        sym("data/abs", "/etc/conf.d/c.conf"),
        sym("data/up", "../../../etc/passwd"),
        d("etc"),
        d("etc/conf.d"),
        f("etc/conf.d/.wh..wh..opq", ""),
        f("etc/conf.d/c.conf", "c\n"),
        d("usr"),
        d("usr/local"),
        d("usr/local/bin"),
        f("usr/local/bin/suid", "#!/bin/bash\n", 0o4755),
    ]


def layer3_entries() -> list:
    return [
        d("opt"),
        f("opt/.wh.keep", ""),
        d("home", 0o755),
        d("home/user", 0o755),
        f("home/user/mine.txt", "owned by 1000\n", uid=1000),
    ]


def _blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def compress(data: bytes, how: str) -> tuple[bytes, str]:
    media = "application/vnd.oci.image.layer.v1.tar"
    if how == "gzip":
        return gzip.compress(data, mtime=0), media + "+gzip"
    if how == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout, media + "+zstd"
    return data, media


def write_layout(
    root: Path,
    layers: list[bytes],
    tag: str = "latest",
    compression: str = "gzip",
    arch: str = "amd64",
    config: dict | None = None,
    extra_arches: tuple[str, ...] = (),
) -> Path:
    """An OCI image layout at ``root`` with one image tagged ``tag`` (an index over several platforms when
    ``extra_arches`` names more; those share the layers but say another architecture)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    image_config = {
        "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "IMAGE_VAR=from-config"],
        "WorkingDir": "/data",
        "Cmd": ["/bin/bash"],
        **(config or {}),
    }
    descriptors, diff_ids = [], []
    for data in layers:
        packed, media = compress(data, compression)
        descriptors.append({"mediaType": media, **_blob(root, packed)})
        diff_ids.append("sha256:" + hashlib.sha256(data).hexdigest())

    def manifest_for(architecture: str) -> dict:
        cfg = {
            "architecture": architecture,
            "os": "linux",
            "config": image_config,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000)),
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [],
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **_blob(root, json.dumps(cfg).encode()),
            },
            "layers": descriptors,
        }
        return {
            "mediaType": manifest["mediaType"],
            **_blob(root, json.dumps(manifest).encode()),
            "platform": {"architecture": architecture, "os": "linux"},
        }

    arches = ((arch,) if arch else ()) + extra_arches
    if len(arches) == 1:
        top = manifest_for(arches[0])
        top.pop("platform")
    else:
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [manifest_for(a) for a in arches],
        }
        top = {"mediaType": index["mediaType"], **_blob(root, json.dumps(index).encode())}
    top["annotations"] = {"org.opencontainers.image.ref.name": tag}
    index_path = root / "index.json"
    old = json.loads(index_path.read_text())["manifests"] if index_path.exists() else []
    index_path.write_text(json.dumps({"schemaVersion": 2, "manifests": [*old, top]}))
    return root


def build_test_image(root: Path, tag: str = "latest", compression: str = "gzip", **kwargs) -> Path:
    """The three-layer test image (see the module docstring) as an OCI layout."""
    layers = [layer_tar(base_entries()), layer_tar(layer2_entries()), layer_tar(layer3_entries())]
    return write_layout(root, layers, tag, compression, **kwargs)
