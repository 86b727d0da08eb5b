"""Benchmark container images as swebox layers: pull+convert, stored size, cold start and reset.

The image is made of host folders, as an OCI layout with gzip layers (what registries serve): layer 1 holds
/usr/bin, /usr/lib/x86_64-linux-gnu (or the --base folders) so bash runs in it, layer 2 /usr/share and
layer 3 /usr/include: about 2 GB and tens of thousands of files, SWE-bench's size. It is pushed with skopeo
to Debian's docker-registry on 127.0.0.1 (when installed; else imported from the layout), then measured:
pull+convert into a fresh store, stored bytes next to the sum of the compressed layers and the unpacked
tree, cold start (node cache empty: copy + mount each layer, start a sandbox, run `true`), warm start (a new
sandbox on materialised layers) and reset (median of --resets).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import Platform, acquire_image, import_image, oci_layout
from swebox.envs.cache.images.registry import RegistryConfig, pull
from swebox.envs.sandbox import Sandbox

DEFAULT_LAYERS = ("/usr/bin,/usr/lib/x86_64-linux-gnu,/usr/lib64", "/usr/share", "/usr/include")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--layer",
        action="append",
        default=[],
        help="comma-separated host folders making one "
        f"layer, base first (repeatable; default {' | '.join(DEFAULT_LAYERS)})",
    )
    parser.add_argument("--resets", type=int, default=20, help="resets to time (default 20)")
    parser.add_argument("--work", default="", help="work folder (default: a temporary folder, removed)")
    parser.set_defaults(func=run)


def _layer(folders: list[str], dest: Path) -> tuple[str, str]:
    """A gzip layer of host folders at their own paths; returns (diff_id hex, compressed digest hex)."""
    raw = dest.with_suffix(".tar")
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        for top in ("usr", "usr/lib"):
            if any(f.startswith(f"/{top}/") for f in folders):
                tar.add(f"/{top}", top, recursive=False)
        for folder in folders:
            tar.add(folder, folder.lstrip("/"))
        if "/usr/bin" in folders:
            for name, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
    diff_id = _sha256(raw)
    with open(dest, "wb") as out:
        subprocess.run(["gzip", "-6", "-n", "-c", str(raw)], stdout=out, check=True)
    raw.unlink()
    return diff_id, _sha256(dest)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _layout(root: Path, layers: list[list[str]]) -> Path:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    descriptors, diff_ids = [], []
    for i, folders in enumerate(layers):
        tmp = root / f"layer{i}.gz"
        diff_id, digest = _layer(folders, tmp)
        size = tmp.stat().st_size
        os.rename(tmp, blobs / digest)
        descriptors.append(
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": f"sha256:{digest}", "size": size}
        )
        diff_ids.append(f"sha256:{diff_id}")

    def blob(data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    config = {
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {"Env": ["PATH=/usr/bin:/bin"], "WorkingDir": "/"},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(json.dumps(config).encode())},
        "layers": descriptors,
    }
    top = {
        "mediaType": manifest["mediaType"],
        **blob(json.dumps(manifest).encode()),
        "annotations": {"org.opencontainers.image.ref.name": "bench"},
    }
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return root


def _registry(work: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (work / "registry.yml").write_text(
        f"version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: "
        f"{{rootdirectory: {work / 'registry'}}}\nhttp: {{addr: '127.0.0.1:{port}'}}\n"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(work / "registry.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"127.0.0.1:{port}"


def run(args: argparse.Namespace) -> int:
    work = Path(args.work or tempfile.mkdtemp(prefix="swebox-bench-images-"))
    work.mkdir(parents=True, exist_ok=True)
    layers = [part.split(",") for part in (args.layer or DEFAULT_LAYERS)]
    registry = None
    try:
        t0 = time.perf_counter()
        layout = _layout(work / "layout", [[f for f in group if os.path.isdir(f)] for group in layers])
        print(f"image written as an OCI layout in {time.perf_counter() - t0:.1f} s (not part of the numbers)")
        store = LayerStore(work / "store")
        if shutil.which("docker-registry") and shutil.which("skopeo"):
            registry, address = _registry(work)
            subprocess.run(
                [
                    "skopeo",
                    "copy",
                    "--quiet",
                    "--dest-tls-verify=false",
                    f"oci:{layout}:bench",
                    f"docker://{address}/bench/image:1",
                ],
                check=True,
            )
            ref, how = f"{address}/bench/image:1", "pull from a loopback registry + convert"
            t0 = time.perf_counter()
            record = pull(store, ref, Platform("linux", "amd64"), RegistryConfig(insecure=True))
        else:
            ref, how = "bench", "import from an OCI layout + convert"
            t0 = time.perf_counter()
            record = import_image(store, oci_layout(layout, "bench"), ref, "linux/amd64")
        pull_s = time.perf_counter() - t0
        manifests = [store.require(k) for k in record.layers]
        stored = sum(m.size for m in manifests)
        unpacked = sum(m.tree_bytes for m in manifests)
        files = sum(m.files for m in manifests)
        cache = LayerCache(store, LayerCacheConfig(root=str(work / "node")))
        try:
            t0 = time.perf_counter()
            with acquire_image(cache, ref) as held, Sandbox(held.paths, held.policy) as sb:
                sb.exec("true")
                cold_s = time.perf_counter() - t0
                resets = []
                for _ in range(args.resets):
                    t1 = time.perf_counter()
                    sb.reset()
                    sb.exec("true")
                    resets.append(time.perf_counter() - t1)
                check = sb.exec("ls /usr/share | wc -l; bash --version | head -1").output.split()
            t0 = time.perf_counter()
            with acquire_image(cache, ref) as held, Sandbox(held.paths, held.policy) as sb:
                sb.exec("true")
                warm_s = time.perf_counter() - t0
        finally:
            cache.close()
        load = os.getloadavg()[0]
        print(
            f"\nimage: {len(manifests)} layers, {files} entries, {unpacked / 1e9:.2f} GB of files unpacked; "
            f"load average {load:.1f}; sandbox sees {check[0]} entries in /usr/share"
        )
        print("| measure | value |\n|---|---:|")
        print(f"| {how}, s | {pull_s:.1f} |")
        print(f"| compressed layers (gzip, as served), MB | {record.compressed_bytes / 1e6:.0f} |")
        print(
            f"| stored as squashfs layers, MB | {stored / 1e6:.0f} ({stored / record.compressed_bytes:.2f}x "
            f"the compressed layers, {stored / unpacked:.2f}x unpacked) |"
        )
        print(f"| cold start (materialise {len(record.stack())} layers + sandbox + `true`), ms | {cold_s * 1e3:.0f} |")
        print(f"| warm start (new sandbox on materialised layers), ms | {warm_s * 1e3:.0f} |")
        print(f"| reset + `true`, median of {len(resets)}, ms | {statistics.median(resets) * 1e3:.1f} |")
    finally:
        if registry is not None:
            registry.terminate()
            registry.wait()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0
