"""Pulling from a Docker Registry HTTP API v2 registry with skopeo, then converting like any OCI layout.

Why skopeo (Debian's package, containers/image inside) rather than an HTTP client of our own or python-dxf:
it is the reference client of the containers ecosystem and already does what a registry pull must get right:
Docker Hub's anonymous bearer-token flow and token auth with credentials, basic auth, ``docker login`` /
``auth.json`` credentials, OCI and Docker schema-2 manifests and manifest lists, and every blob checked
against its digest while it streams. python-dxf speaks the protocol but leaves manifest lists, media types
and platform selection to the caller.

What we add around it: the platform is chosen from the raw index ourselves (an image for other architectures
only is a clear error listing what exists); the copy goes into a download folder in the store, which
``skopeo copy`` resumes at blob granularity (blobs already there are not fetched again); a registry that
answers 429/503 (or drops the connection) is retried with exponential backoff, then reported clearly; the
download holds the node's I/O budget for the image's compressed size.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..budget import IOBudget
from ..store import LayerStore
from .records import ImageRecord, import_image
from .sources import INDEX_TYPES, Platform, digest_of, oci_layout, select_platform

TRANSIENT = re.compile(
    r"(?<![\w:.])(429|502|503|504)(?![\w.])|too many requests|toomanyrequests|service unavailable|bad gateway|"
    r"gateway timeout|unexpected eof|connection reset|connection refused|i/o timeout|tls handshake timeout|: eof"
)
"""skopeo messages of failures worth another try (rate limits, overload, a dropped connection). A status code
counts only as a word of its own: ``127.0.0.1:42925`` is a port, not a 429."""

AUTH_FAILURE = ("unauthorized", "authentication required", "denied")
"""skopeo messages of a refused login; never retried, whatever else the message holds."""


def is_transient(err: str) -> bool:
    """Whether skopeo's stderr ``err`` describes a failure worth another try (never an auth refusal)."""
    lowered = err.lower()
    return not any(w in lowered for w in AUTH_FAILURE) and TRANSIENT.search(lowered) is not None


class RegistryError(RuntimeError):
    """The registry refused, kept failing, or does not have the image; the message says what to do."""


@dataclass(frozen=True)
class RegistryConfig:
    """How to talk to a registry."""

    insecure: bool = False
    """Plain HTTP and no TLS verification (a loopback test registry); never for a registry on a network."""
    creds: str = ""
    """``USER:PASSWORD`` for basic or token auth (handed to skopeo in a private auth file); '' uses
    ``auth.json``/``docker login`` credentials, else anonymous access (Docker Hub's anonymous bearer token)."""
    authfile: str = ""
    """A containers auth.json to read credentials from ('' = skopeo's default places)."""
    retries: int = 4
    """Further attempts after a transient failure (429, 5xx, dropped connection) before giving up."""
    backoff_s: float = 1.0
    """Wait before the first retry; doubled for each next one (at most 60 s)."""
    timeout_s: float = 3600.0
    """Limit of one skopeo call (a whole image download)."""

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"RegistryConfig.retries: expected >= 0; found {self.retries}.")
        if self.backoff_s < 0 or self.timeout_s <= 0:
            raise ValueError(
                f"RegistryConfig: expected backoff_s >= 0 and timeout_s > 0; found "
                f"{self.backoff_s} and {self.timeout_s}."
            )
        if self.creds and ":" not in self.creds:
            raise ValueError("RegistryConfig.creds: expected USER:PASSWORD; found no ':'.")


def _skopeo_args(config: RegistryConfig, prefix: str) -> list[str]:
    args = [f"--{prefix}tls-verify={'false' if config.insecure else 'true'}"]
    if config.creds:
        args.append(f"--{prefix}creds={config.creds}")
    if config.authfile:
        args.append(f"--{prefix}authfile={config.authfile}")
    return args


def _skopeo(cmd: list[str], ref: str, config: RegistryConfig, doing: str) -> bytes:
    """Run skopeo, retrying transient failures with backoff; a clear RegistryError otherwise."""
    if shutil.which("skopeo") is None:
        raise RegistryError("pulling from a registry needs skopeo: `apt-get install skopeo` (Debian/Ubuntu).")
    started, attempt = time.monotonic(), 0
    while True:
        try:
            proc = subprocess.run(
                ["skopeo", "--command-timeout", f"{int(config.timeout_s)}s", *cmd],
                capture_output=True,
                timeout=config.timeout_s + 30,
            )
        except subprocess.TimeoutExpired:
            raise RegistryError(
                f"{ref}: {doing} took longer than {config.timeout_s:.0f} s; raise "
                f"RegistryConfig.timeout_s or check the network."
            ) from None
        if proc.returncode == 0:
            return proc.stdout
        err = proc.stderr.decode(errors="replace").strip()
        why = err.splitlines()[-1] if err else f"exit {proc.returncode}"
        if not is_transient(err):
            hint = " (check --creds / `skopeo login`)" if any(w in err.lower() for w in AUTH_FAILURE) else ""
            raise RegistryError(f"{ref}: {doing} failed: {why}{hint}")
        if attempt >= config.retries:
            raise RegistryError(
                f"{ref}: {doing} failed {attempt + 1} times over "
                f"{time.monotonic() - started:.0f} s, last: {why}. The registry is rate-limiting "
                f"or unavailable: try again later, or raise --retries."
            )
        time.sleep(min(60.0, config.backoff_s * 2**attempt))
        attempt += 1


def _name(ref: str) -> str:
    """``repo[:tag][@digest]`` -> ``repo`` (a port's colon is kept)."""
    name = ref.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def resolve(ref: str, platform: Platform, config: RegistryConfig) -> tuple[str, dict[str, Any]]:
    """The digest of ``ref``'s manifest for ``platform`` (an index is resolved) and that manifest."""
    raw = _skopeo(
        ["inspect", "--raw", *_skopeo_args(config, ""), f"docker://{ref}"], ref, config, "reading the manifest"
    )
    manifest = json.loads(raw)
    digest = digest_of(raw)
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        digest = select_platform(manifest, platform, f"registry image {ref}")["digest"]
        raw = _skopeo(
            ["inspect", "--raw", *_skopeo_args(config, ""), f"docker://{_name(ref)}@{digest}"],
            ref,
            config,
            "reading the platform's manifest",
        )
        manifest = json.loads(raw)
        if digest_of(raw) != digest:
            raise RegistryError(
                f"{ref}: the manifest for {platform} hashes to {digest_of(raw)}, the index says "
                f"{digest}; the registry is serving corrupt data."
            )
    if manifest.get("schemaVersion") == 1:
        raise RegistryError(
            f"{ref}: Docker schema-1 manifests are not supported (deprecated since 2017); "
            f"push the image again with a current client."
        )
    return digest, manifest


def registry_host(ref: str) -> str:
    """The registry part of a reference, as docker reads it (``docker.io`` when the first part is no host)."""
    first, sep, _ = ref.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else "docker.io"


@contextlib.contextmanager
def _private_creds(ref: str, config: RegistryConfig) -> Iterator[RegistryConfig]:
    """Credentials go to skopeo in a mode-0600 auth file, never on its command line (which `ps` shows)."""
    if not config.creds:
        yield config
        return
    with tempfile.TemporaryDirectory(prefix="swebox-auth-") as folder:
        path = os.path.join(folder, "auth.json")
        token = base64.b64encode(config.creds.encode()).decode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"auths": {registry_host(ref): {"auth": token}}}, f)
        yield dataclasses.replace(config, creds="", authfile=path)


def pull(
    store: LayerStore,
    ref: str,
    platform: Platform | None = None,
    config: RegistryConfig | None = None,
    budget: IOBudget | None = None,
) -> ImageRecord:
    """Download ``ref`` for ``platform`` and record it in ``store`` (layers already there are reused)."""
    with _private_creds(ref, config or RegistryConfig()) as private:
        return _pull(store, ref, platform or Platform("linux", "amd64"), private, budget)


def _pull(
    store: LayerStore, ref: str, platform: Platform, config: RegistryConfig, budget: IOBudget | None
) -> ImageRecord:
    digest, manifest = resolve(ref, platform, config)
    compressed = sum(int(layer.get("size", 0)) for layer in manifest.get("layers", []))
    folder = store.root / "downloads" / hashlib.sha256(f"{_name(ref)}@{digest}".encode()).hexdigest()[:24]
    folder.parent.mkdir(exist_ok=True)
    copy = [
        "copy",
        "--quiet",
        "--retry-times",
        "0",
        *_skopeo_args(config, "src-"),
        f"docker://{_name(ref)}@{digest}",
        f"oci:{folder}:image",
    ]
    budget = budget or IOBudget()
    with store.lock(folder.name):  # gc leaves a download alone while its lock is held
        with budget.hold(compressed):
            _skopeo(copy, ref, config, "downloading the image")
        source = oci_layout(folder, "image", platform, kind="registry", location=ref)
        source.digest = digest  # the registry's digest; skopeo rewrote a Docker manifest as an OCI one
        record = import_image(store, source, ref, str(platform), budget)
        shutil.rmtree(folder, ignore_errors=True)
    return record
