"""Reading an image from an OCI image layout folder or a ``docker save`` tarball (no registry needed).

Both give an :class:`ImageSource`: the image's manifest digest, its config (the OCI image config JSON) and its
layers as :class:`LayerBlob` s, base first. Multi-arch indexes are resolved to one platform; every manifest,
config and layer is checked against the digest that names it (layers while they are converted).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .convert import LayerBlob, LayerDigestError

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
REF_NAME = "org.opencontainers.image.ref.name"


class ImageSourceError(ValueError):
    """The image (or the platform asked for) is not in the source; the message lists what is."""


@dataclass(frozen=True)
class Platform:
    """An image platform, written ``os/architecture[/variant]`` (``linux/amd64``, ``linux/arm64/v8``)."""

    os: str
    architecture: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(f"platform: expected OS/ARCH[/VARIANT] such as linux/amd64; found {text!r}.")
        return cls(*parts)

    @classmethod
    def of(cls, d: dict[str, Any]) -> Platform:
        return cls(d.get("os", ""), d.get("architecture", ""), d.get("variant", ""))

    def matches(self, other: Platform) -> bool:
        return (self.os, self.architecture) == (other.os, other.architecture) and (
            not self.variant or not other.variant or self.variant == other.variant
        )

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


@dataclass
class ImageSource:
    """An image ready to convert."""

    digest: str
    """``sha256:`` digest of the image's manifest (of one platform)."""
    config: dict[str, Any]
    """The OCI image config (``config.Env``, ``rootfs.diff_ids``, ``architecture``, ...)."""
    layers: list[LayerBlob]
    """The layers, base first."""
    kind: str
    """Where it came from: 'registry', 'oci-layout' or 'docker-archive'."""
    location: str
    """The registry reference, folder or file."""


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(data: bytes, want: str, what: str) -> bytes:
    if digest_of(data) != want:
        raise LayerDigestError(
            f"{what}: its bytes hash to {digest_of(data)}, expected {want}; the source is "
            f"corrupt: fetch or save the image again."
        )
    return data


def select_platform(index: dict[str, Any], platform: Platform, where: str) -> dict[str, Any]:
    """The manifest descriptor of ``platform`` in a multi-arch index, or a clear error listing the others."""
    found = [Platform.of(d.get("platform", {})) for d in index.get("manifests", [])]
    for descriptor, have in zip(index.get("manifests", []), found, strict=True):
        if have.matches(platform):
            return descriptor
    listed = ", ".join(str(p) for p in found if p.os != "unknown") or "none"
    raise ImageSourceError(
        f"{where}: no image for platform {platform}; the index has {listed}. Pass "
        f"--platform with one of those (a task image must match this host to run)."
    )


def check_platform(config: dict[str, Any], platform: Platform, where: str) -> None:
    have = Platform.of(config)
    if have.os and not have.matches(platform):
        raise ImageSourceError(
            f"{where}: the image is for {have}, not {platform}; pass --platform {have} "
            f"to convert it anyway (it will only run on such a host)."
        )


def image_layers(manifest: dict[str, Any], config: dict[str, Any], opener, where: str) -> list[LayerBlob]:
    descriptors = manifest.get("layers", [])
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(descriptors) != len(diff_ids):
        raise ImageSourceError(
            f"{where}: the manifest lists {len(descriptors)} layers but the config's "
            f"rootfs.diff_ids has {len(diff_ids)}; the image is malformed."
        )
    return [
        LayerBlob(opener(d["digest"]), d["digest"], diff_id, int(d.get("size", 0)), d.get("mediaType", ""))
        for d, diff_id in zip(descriptors, diff_ids, strict=True)
    ]


# ---- OCI image layout ------------------------------------------------------------------------------
def oci_layout(
    folder: str | Path, tag: str = "", platform: Platform | None = None, kind: str = "oci-layout", location: str = ""
) -> ImageSource:
    """The image tagged ``tag`` (or the only one) in an OCI image layout folder."""
    root = Path(folder)
    where = location or f"OCI layout {root}"
    platform = platform or Platform("linux", "amd64")
    if not (root / "index.json").is_file():
        raise ImageSourceError(
            f"{where}: expected an OCI image layout (index.json, blobs/); found no "
            f"index.json. Make one with `skopeo copy docker://IMAGE oci:{root}:TAG`."
        )

    def blob(digest: str) -> Path:
        algo, _, hexdigest = digest.partition(":")
        path = root / "blobs" / algo / hexdigest
        if algo != "sha256" or "/" in hexdigest or not path.is_file():
            raise ImageSourceError(f"{where}: blob {digest} is missing from {root / 'blobs'}.")
        return path

    def read(descriptor: dict[str, Any], what: str) -> dict[str, Any]:
        data = blob(descriptor["digest"]).read_bytes()
        return json.loads(check_digest(data, descriptor["digest"], f"{where}: {what}"))

    index = json.loads((root / "index.json").read_text())
    entries = index.get("manifests", [])
    named = [d for d in entries if not tag or d.get("annotations", {}).get(REF_NAME) == tag]
    if len(named) != 1:
        tags = sorted(d.get("annotations", {}).get(REF_NAME, "<untagged>") for d in entries)
        raise ImageSourceError(
            f"{where}: expected one image{f' tagged {tag!r}' if tag else ''}; found "
            f"{len(named)} (tags: {', '.join(tags) or 'none'}). Name one as {root}:TAG."
        )
    descriptor = named[0]
    if descriptor.get("mediaType") in INDEX_TYPES:
        descriptor = select_platform(read(descriptor, "index"), platform, where)
    manifest = read(descriptor, "manifest")
    config = read(manifest["config"], "config")
    check_platform(config, platform, where)
    layers = image_layers(manifest, config, lambda d: lambda: open(blob(d), "rb"), where)  # noqa: SIM115
    return ImageSource(descriptor["digest"], config, layers, kind, location or str(root))


# ---- docker save tarball ---------------------------------------------------------------------------
def docker_archive(path: str | Path, ref: str = "", platform: Platform | None = None) -> ImageSource:
    """The image ``ref`` (a RepoTag, or the only image) of a ``docker save`` tarball."""
    path = Path(path)
    where = f"docker archive {path}"
    platform = platform or Platform("linux", "amd64")
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by the `with tar` below
        members = {_clean(m.name): m for m in tar.getmembers() if m.isreg()}
    except (OSError, tarfile.TarError) as e:
        raise ImageSourceError(f"{where}: expected an uncompressed tar written by `docker save`; {e}") from None

    def member(name: str) -> tarfile.TarInfo:
        name = _clean(name)
        if name not in members:
            raise ImageSourceError(f"{where}: {name} is missing from the archive.")
        return members[name]

    with tar:
        images = json.loads(tar.extractfile(member("manifest.json")).read())
        wanted = {ref, f"docker.io/{ref}", f"docker.io/library/{ref}"}  # docker names Hub images in full
        named = [i for i in images if not ref or wanted & set(i.get("RepoTags") or [])]
        if len(named) != 1:
            tags = sorted(t for i in images for t in (i.get("RepoTags") or ["<untagged>"]))
            raise ImageSourceError(
                f"{where}: expected one image{f' tagged {ref!r}' if ref else ''}; found "
                f"{len(named)} (tags: {', '.join(tags)}). Name one as {path}:REPO:TAG."
            )
        image = named[0]
        config_bytes = tar.extractfile(member(image["Config"])).read()
    config = json.loads(config_bytes)
    config_digest = digest_of(config_bytes)
    if image["Config"].startswith("blobs/sha256/"):  # docker >= 25 names blobs by digest: check it
        check_digest(config_bytes, "sha256:" + image["Config"].rsplit("/", 1)[1], f"{where}: config")
    check_platform(config, platform, where)
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(diff_ids) != len(image["Layers"]):
        raise ImageSourceError(
            f"{where}: manifest.json lists {len(image['Layers'])} layers but the config "
            f"has {len(diff_ids)} diff_ids; the archive is malformed."
        )
    layers = []
    for name, diff_id in zip(image["Layers"], diff_ids, strict=True):
        info = member(name)
        # legacy <id>/layer.tar is the uncompressed tar itself; docker >= 25 names blobs by their digest
        digest = "sha256:" + name.rsplit("/", 1)[1] if name.startswith("blobs/sha256/") else diff_id
        layers.append(LayerBlob(_member_opener(path, info), digest, diff_id, info.size, "docker-archive"))
    return ImageSource(config_digest, config, layers, "docker-archive", str(path))


def _clean(name: str) -> str:
    return name.removeprefix("./").lstrip("/")


def _member_opener(path: Path, info: tarfile.TarInfo):
    """Opens one member's bytes straight from the archive (a window of the file, no copy)."""

    def opener() -> io.BufferedReader:
        f = open(path, "rb")  # noqa: SIM115 - the caller closes the returned reader
        f.seek(info.offset_data)
        return io.BufferedReader(_Window(f, info.size))

    return opener


class _Window(io.RawIOBase):
    def __init__(self, f, size: int) -> None:
        self.f, self.left = f, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.f.readinto(memoryview(buffer)[: min(len(buffer), self.left)]) if self.left else 0
        self.left -= n
        return n

    def close(self) -> None:
        self.f.close()
        super().close()
