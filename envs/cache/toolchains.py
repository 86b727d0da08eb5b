"""Toolchain layers: Node.js, Go, Rust, a JDK and C/C++ build tools as content-addressed read-only layers.

Each is built rootless from Debian's packages (:mod:`.debs`): the roots' dependency closure, minus the packages
the host's ``/usr`` (bound into every sandbox) already provides at the same or a newer version, unpacked below
``opt/toolchains/<name>/`` of the layer. It lives under its own prefix because a layer with a non-empty ``usr/``
would replace the host's /usr in the sandbox (``sandbox.rootfs.provides``); :func:`toolchain_env` gives the
PATH, LD_LIBRARY_PATH, GOROOT, JAVA_HOME ... that use it. The layer's key is a hash of the resolved packages
(name, version, sha256 of each .deb) and the layout, so the same inputs give the same key; the manifest's meta
records the packages, and which dependencies the host provided. Stored and published like env layers
(``LayerStore.build``: one builder per key, atomic publication; the build folder is a temporary folder removed
on any failure or interrupt).

Package caches (npm's, Go's module and build caches, CARGO_HOME, Maven's repository) go under
:data:`.toolchain_specs.CACHE_ROOT`, outside /testbed: an env build keeps what it downloaded there (tests run
offline later), a task layer never holds it. What each toolchain is made of is :mod:`.toolchain_specs`' catalogue.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..sandbox import Layer
from ..sandbox.policy import DEFAULT_ENV
from . import debs
from .layer_cache import LayerCache, LayerCacheConfig, LayerHandle
from .layer_check import check_layer
from .manifest import Manifest
from .store import LayerStore, write_atomic
from .toolchain_specs import ToolchainSpec, get_spec

TOOLCHAIN_LAYOUT = "2"
"""Part of every toolchain key: bumped when the tree layout below the prefix changes (2: relative links to
packages the host provides name the host's path)."""
_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib")


def toolchain_env(names: Sequence[str]) -> dict[str, str]:
    """Environment variables a sandbox needs to use the toolchain layers ``names`` (PATH and LD_LIBRARY_PATH
    the toolchains' after /venv/bin, in order, before the system's): what to put over ``SandboxPolicy.env``."""
    specs = [get_spec(n) for n in names]
    env: dict[str, str] = {}
    for spec in specs:
        env.update({k: v.replace("{prefix}", spec.prefix) for k, v in spec.env.items()})
    bins = [f"{s.prefix}/{d}" for s in specs for d in s.bin_dirs]
    libs = [f"{s.prefix}/{d}" for s in specs for d in _LIB_DIRS]
    if specs:
        first, *rest = DEFAULT_ENV["PATH"].split(":")  # /venv/bin stays first: a task's own venv wins
        env["PATH"] = ":".join([first, *bins, *rest])
        env["LD_LIBRARY_PATH"] = ":".join(libs)
    return env


# ---- resolution: the packages a layer holds (cached per host state: apt's lists and dpkg's status)

_resolved: dict[tuple[str, str], dict] = {}
_lock = threading.Lock()


def _host_fingerprint(spec: ToolchainSpec) -> str:
    h = hashlib.sha256(json.dumps([spec.packages, spec.own, TOOLCHAIN_LAYOUT, spec.files]).encode())
    lists = sorted(Path("/var/lib/apt/lists").glob("*Packages*")) + [Path("/var/lib/dpkg/status")]
    for path in lists:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:24]


def resolve(name: str, cache_dir: Path | None = None) -> dict:
    """``{"key", "debs": [Deb dicts], "from_host": {package: host version}}`` for the toolchain ``name``: the
    closure of its packages minus what the host has installed (any version: a library's package name carries
    its soname) and is not ``own``. A host with older patch releases thus lends its own (e.g. libssl3), never a
    second libc or python shadowing the host's. ``cache_dir`` keeps the answer for other processes (apt takes
    seconds), keyed by the host's package state."""
    spec = get_spec(name)
    fingerprint = _host_fingerprint(spec)
    saved = cache_dir / f"{name}-{fingerprint}.json" if cache_dir else None
    with _lock:
        if (name, fingerprint) in _resolved:
            return _resolved[(name, fingerprint)]
    if saved is not None and saved.is_file():
        result = json.loads(saved.read_text())
        with _lock:
            return _resolved.setdefault((name, fingerprint), result)
    host = debs.host_packages()
    shipped, from_host = [], {}
    for deb in debs.resolve(spec.packages):
        mine = deb.name in spec.packages or any(fnmatch.fnmatchcase(deb.name, p) for p in spec.own)
        if not mine and deb.name in host:  # same package name, same ABI within a Debian release
            from_host[deb.name] = host[deb.name]
        else:
            shipped.append(deb)
    content = {
        "toolchain": name,
        "layout": TOOLCHAIN_LAYOUT,
        "prefix": spec.prefix,
        "aliases": spec.aliases,
        "debs": [[d.name, d.version, d.arch, d.sha256] for d in shipped],
    }
    if spec.files:  # only then: the keys of toolchains without files stay those of their published layers
        content["files"] = spec.files
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    result = {"key": f"toolchain-{name}-{digest[:20]}", "debs": [d.to_dict() for d in shipped], "from_host": from_host}
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(saved, json.dumps(result, indent=1).encode())
    with _lock:
        _resolved[(name, fingerprint)] = result
    return result


def toolchain_key(name: str, store: LayerStore | None = None) -> str:
    """The key of ``name``'s layer for this host's package lists (resolves; downloads nothing)."""
    return resolve(name, _resolutions(store))["key"]


def _resolutions(store: LayerStore | None) -> Path | None:
    return store.root / "toolchains" if store is not None else None


# ---- building and using


def default_store_root() -> Path:
    """$SWEBOX_LAYER_STORE, else runs/layers (what `swebox cache` uses)."""
    return Path(os.environ.get("SWEBOX_LAYER_STORE") or "runs/layers").absolute()


def build_toolchain(store: LayerStore, name: str, *, force: bool = False, work_dir: str = "/var/tmp") -> Manifest:
    """The layer of toolchain ``name`` in ``store``: reused when there, else downloaded, unpacked, checked in a
    sandbox and published (atomically, once across processes)."""
    spec, plan = get_spec(name), resolve(name, _resolutions(store))
    key = plan["key"]

    def build(publish) -> Manifest:
        wanted = [debs.Deb(d["package"], d["version"], d["arch"], d["sha256"], d["size"]) for d in plan["debs"]]
        log = [
            f"# swebox toolchain {name} {key}: {len(wanted)} packages, {len(plan['from_host'])} provided by the host"
        ]
        with tempfile.TemporaryDirectory(prefix=f"swebox-{key}-", dir=work_dir) as tmp:
            os.chmod(tmp, 0o755)
            downloads, tree = Path(tmp) / "debs", Path(tmp) / "layer"
            downloads.mkdir()
            root = tree / spec.prefix.lstrip("/")
            root.mkdir(parents=True)
            for path in debs.download(wanted, downloads):
                debs.extract(path, root)
            log.append(f"# relinked {debs.relink(root, spec.prefix)} absolute symlinks into {spec.prefix}")
            for rel, text in spec.files.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).unlink(missing_ok=True)  # a package's file (or link) of that path is replaced
                (root / rel).write_text(text.replace("{prefix}", spec.prefix))
                log.append(f"# wrote {spec.prefix}/{rel}")
            for compiled, alias in spec.aliases.items():
                patched = debs.patch_paths(root, compiled, alias)
                link = tree / alias.lstrip("/")
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(root / compiled.lstrip("/"), link.parent))
                log.append(f"# {compiled} -> {alias} in {', '.join(patched) or 'no file'}")
            record = {
                "toolchain": name,
                "key": key,
                "prefix": spec.prefix,
                "debs": plan["debs"],
                "from_host": plan["from_host"],
                "env": toolchain_env([name]),
            }
            (root / "toolchain.json").write_text(json.dumps(record, indent=1) + "\n")
            _check(spec, tree, log)
            return publish(
                layer_dir=tree,
                kind="toolchain",
                log="\n".join(log) + "\n",
                meta={"toolchain": name, "prefix": spec.prefix, "debs": plan["debs"], "from_host": plan["from_host"]},
            )

    return store.build(key, build, force=force)


def _check(spec: ToolchainSpec, tree: Path, log: list[str]) -> None:
    if not spec.check:
        return
    env = {**DEFAULT_ENV, **toolchain_env([spec.name])}
    check_layer(
        tree, f"toolchain-{spec.name}", spec.check, env, log, f"toolchain {spec.name}: its check `{spec.check}`"
    )


class ToolchainMissing(LookupError):
    """An env layer's toolchain layer that its store lacks; the message says how to build it."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class UnderEnv:
    """The read-only layers an env layer was built on (its manifest's ``meta["toolchains"]``), which every
    sandbox over the env stacks below it."""

    interpreter: dict[str, str] = field(default_factory=dict)
    """Its interpreter layer (:mod:`.pythons`), name -> key ('python3.9'; the one whose key is the manifest's
    ``meta["python_layer"]``), or empty: it brings no environment variables, the env's venv names its path."""
    toolchains: dict[str, str] = field(default_factory=dict)
    """Its toolchain layers (names of :data:`.toolchain_specs.TOOLCHAINS`) -> keys, in order: :func:`toolchain_env`
    of the names gives a sandbox over the env their variables."""

    @property
    def layers(self) -> dict[str, str]:
        """Every layer below the env, lowest first: the interpreter layer, then the toolchains."""
        return {**self.interpreter, **self.toolchains}


def env_toolchains(store: LayerStore, env_key: str) -> UnderEnv:
    """The interpreter and toolchain layers the env layer ``env_key`` was built on (its manifest names them;
    none for an env without any, or one the store lacks). Every sandbox over the env stacks ``layers`` below
    it, in this order, with :func:`toolchain_env` of the toolchains' names: the build's tools are the tests'."""
    manifest = store.get(env_key)
    meta = manifest.meta if manifest is not None else {}
    tools = dict(meta.get("toolchains") or {})
    python = meta.get("python_layer")  # the builder names the interpreter layer here too (builder._stacked)
    for name, key in tools.items():
        if store.get(key) is not None:
            continue
        if key == python:  # an interpreter layer: imported from an install, not built from Debian's packages
            raise ToolchainMissing(
                f"env layer {env_key}: expected its interpreter layer {key} ({name}) in the store {store.root}; "
                f"found none. Import the same install again (its key is the hash of the relocated tree), e.g.:"
                f"\n    swebox cache --store {store.root} python import ~/.pyenv/versions/{name[len('python') :]}.N"
            )
        raise ToolchainMissing(
            f"env layer {env_key}: expected its toolchain layer {key} ({name}) in the store "
            f"{store.root}; found none. Build it with:\n    swebox cache --store "
            f"{store.root} toolchain build {name}"
        )
    return UnderEnv({n: k for n, k in tools.items() if k == python}, {n: k for n, k in tools.items() if k != python})


_caches: dict[str, LayerCache] = {}
_held: dict[tuple[str, str], LayerHandle] = {}


def toolchain_layer(name: str, store_root: Path | None = None) -> Layer:
    """The layer of toolchain ``name``, materialised on this node and held for the life of the process: built
    into the store (``store_root``, default :func:`default_store_root`) on first use, then cached."""
    get_spec(name)  # a bad name fails before a store folder is made
    root = Path(store_root or default_store_root()).absolute()
    return held_layer(build_toolchain(LayerStore(root), name).key, root)


def held_layer(key: str, store_root: Path) -> Layer:
    """The store's layer ``key`` (a toolchain's, an interpreter's), materialised on this node and held for the
    life of the process (until :func:`release_toolchain_layers`)."""
    root = Path(store_root).absolute()
    with _lock:
        handle = _held.get((str(root), key))
        if handle is None:
            store = LayerStore(root)
            cache = _caches.get(str(root)) or _caches.setdefault(str(root), LayerCache(store, LayerCacheConfig()))
            handle = _held[(str(root), key)] = cache.acquire(key)
    return Layer(handle.path, name=key)


def release_toolchain_layers() -> None:
    """Release the layers :func:`toolchain_layer` holds (end of a process or a test)."""
    with _lock:
        handles, caches = list(_held.values()), list(_caches.values())
        _held.clear()
        _caches.clear()
    for handle in handles:
        handle.release()
    for cache in caches:
        cache.close()
