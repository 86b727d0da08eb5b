"""Interpreter layers: a Python installation as a content-addressed, read-only layer at a fixed sandbox path.

Python ``X.Y`` appears in a sandbox at ``/opt/swebox/python/X.Y`` (:func:`layer_prefix`), whatever host folder it
came from, so an env layer whose venv was made from it (``home = /opt/swebox/python/X.Y/bin``) needs the layer
store only, not a host interpreter at the same path. The layer is made from a local prefix-style install
(pyenv's builds, python.org's ``make altinstall``, uv's python-build-standalone, a conda prefix): its ``bin``
(the interpreters and the standard scripts; no pip, which lives in the prefix's site-packages), ``lib`` (less
the standard library's own test suites, tkinter/IDLE, the static ``libpython*.a`` and site-packages: a venv
brings its own pip from ``ensurepip``) and ``include`` (extensions compile against its headers), relocated:

- every ELF file's RUNPATH entries under the old prefix become ``$ORIGIN``-relative (:mod:`.elf_runpath`;
  pyenv's name ``/root/.pyenv/versions/3.9.18/lib``, which the sandbox's unprivileged root cannot enter);
- every text file naming the old prefix (or the prefix it was configured for, which a copy moved by hand
  still names) names the new one (``_sysconfigdata``, the ``config`` Makefile, ``pkgconfig``, the scripts'
  shebangs), and the bytecode of those files is dropped.

The old prefix stays inside compiled ELF strings (getpath's fallback ``PREFIX``): Python finds its prefix from
its executable's location, not from that. The system libraries the build links (libssl, libsqlite3, libffi)
come from the host's ``/usr``, bound into every sandbox, as they do for the host's own interpreter.

The key is a hash of the relocated tree (paths, modes, links, contents) and the layout: the same install gives
the same key. A check in a sandbox (``import ssl, sqlite3, ctypes, venv``; a venv whose home is the layer's
``bin``) runs before publication. An env layer built on one names it in ``meta["toolchains"]`` as
``pythonX.Y`` (:func:`layer_name`), so every sandbox over the env stacks it below, as a toolchain layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..sandbox.policy import DEFAULT_ENV
from .elf_runpath import relocate_runpath
from .interpreters import matches
from .layer_check import check_layer
from .manifest import Manifest
from .store import LayerStore

PYTHON_ROOT = "/opt/swebox/python"
"""Where interpreter layers appear in a sandbox: ``/opt/swebox/python/X.Y``."""
PYTHON_LAYOUT = "1"
"""Part of every interpreter layer's key: bumped when what is copied or how it is relocated changes."""
_PROBE = (
    "import json, os, sys, sysconfig; print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3], "
    "'prefix': sys.base_prefix, 'venv': sys.prefix != sys.base_prefix, "
    "'executable': os.path.realpath(sys.executable), 'built_for': sysconfig.get_config_var('prefix') or ''}))"
)
SYSTEM_PREFIXES = ("/usr", "/usr/local", "/")
"""Prefixes of system interpreters, whose files are spread over the system's folders: never imported."""
_SKIPPED = ("test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo", "__phello__", "site-packages")
_SKIPPED_BIN = ("pip", "easy_install", "idle")


class PythonImportError(ValueError):
    """A path that cannot become an interpreter layer; the message says why and what to do."""


@dataclass(frozen=True)
class PythonSource:
    """A local Python installation an interpreter layer is made from."""

    executable: str
    """Its interpreter binary (resolved)."""
    prefix: str
    """``sys.base_prefix``: the folder copied."""
    version: str
    """'3.9.18'."""
    built_for: str = ""
    """The prefix it was configured for (``sysconfig``'s ``prefix``): a copy moved by hand (tests/pyenv_python.py)
    still names pyenv's folder in its ``_sysconfigdata``; relocated like ``prefix``."""

    @property
    def minor(self) -> str:
        """'3.9'."""
        return ".".join(self.version.split(".")[:2])

    def fingerprint(self) -> str:
        """What identifies this install on this host without reading it all (its path, its binary's size and
        mtime, its standard library folder's mtime): the store reuses a layer imported from the same one."""
        parts = [self.prefix, self.version, PYTHON_LAYOUT]
        for path in (self.executable, f"{self.prefix}/lib/python{self.minor}"):
            st = os.stat(path)
            parts += [str(st.st_size), str(st.st_mtime_ns)]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def layer_prefix(minor: str) -> str:
    """Where the interpreter layer of Python ``minor`` ('3.9') appears in a sandbox."""
    return f"{PYTHON_ROOT}/{minor}"


def layer_name(minor: str) -> str:
    """The name an env layer's ``meta["toolchains"]`` gives the interpreter layer under it: 'python3.9'."""
    return f"python{minor}"


def probe(path: str) -> PythonSource:
    """The installation at ``path`` (a prefix or its interpreter binary), or a one-line error."""
    exe = Path(path)
    if exe.is_dir():
        found = sorted(exe.glob("bin/python3.*[0-9]")) or sorted(exe.glob("bin/python3"))
        exe = found[0] if found else exe / "bin" / "python3"
    try:
        out = subprocess.run([str(exe), "-c", _PROBE], capture_output=True, text=True, timeout=60)
        info = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        raise PythonImportError(
            f"python import: expected a Python 3 prefix or interpreter; found {path!r}, which does not run as "
            "one. Name a prefix such as ~/.pyenv/versions/3.9.18 or its bin/python3.9."
        ) from None
    if info["venv"]:
        raise PythonImportError(
            f"python import: expected an installation; found the venv {path!r}. Name its base interpreter "
            f"({info['prefix']})."
        )
    if info["prefix"] in SYSTEM_PREFIXES:
        raise PythonImportError(
            f"python import: expected a self-contained prefix (pyenv, python.org's `make altinstall`, uv); found "
            f"the system interpreter of {info['prefix']!r}, whose files are spread over the system's folders. "
            "Import a pyenv or uv build of the same version instead."
        )
    return PythonSource(info["executable"], info["prefix"], info["version"], info["built_for"])


def _ignore(folder: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n in _SKIPPED or (n.startswith("libpython") and n.endswith(".a"))}
    if os.path.basename(folder) == "bin":
        skipped |= {n for n in names if n.startswith(_SKIPPED_BIN)}
    return skipped


def make_tree(source: PythonSource, tree: Path) -> list[str]:
    """Copy ``source`` relocated to ``tree/opt/swebox/python/X.Y`` (see the module's doc); returns log lines."""
    new_prefix = layer_prefix(source.minor)
    root = tree / new_prefix.lstrip("/")
    root.mkdir(parents=True)
    for part in ("bin", "lib", "include"):
        if os.path.isdir(f"{source.prefix}/{part}"):
            shutil.copytree(f"{source.prefix}/{part}", root / part, symlinks=True, ignore=_ignore)
    (root / "lib" / f"python{source.minor}" / "site-packages").mkdir(exist_ok=True)
    elves, texts = [], []
    # longest first: one prefix may contain the other
    olds = sorted({source.prefix, source.built_for} - {""}, key=len, reverse=True)
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            if path.is_symlink() or name.endswith(".pyc"):
                continue
            with open(path, "rb") as f:
                elf = f.read(4) == b"\x7fELF"
            if elf:
                if any([relocate_runpath(path, old, root) is not None for old in olds]):
                    elves.append(str(path.relative_to(root)))
                continue
            data = path.read_bytes()
            if any(old.encode() in data for old in olds):
                for old in olds:
                    data = data.replace(old.encode(), new_prefix.encode())
                os.chmod(path, path.stat().st_mode | 0o200)
                path.write_bytes(data)
                texts.append(str(path.relative_to(root)))
                for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
                    pyc.unlink()  # compiled from the old text
    subprocess.run(["chmod", "-R", "u+w,a+rX", str(tree)], check=True)
    return [
        f"# python {source.version} from {source.prefix} -> {new_prefix}",
        f"# RUNPATH made $ORIGIN-relative in {len(elves)} ELF files: {' '.join(sorted(elves)[:8])}"
        + (" ..." if len(elves) > 8 else ""),
        f"# {' and '.join(olds)} -> {new_prefix} in {len(texts)} text files: {' '.join(sorted(texts))}",
    ]


def tree_digest(tree: Path) -> str:
    """sha256 over the tree's paths, kinds, permission bits, link targets and file contents (never mtimes)."""
    h = hashlib.sha256(f"swebox-python-layout-{PYTHON_LAYOUT}\0".encode())
    for folder, dirs, names in os.walk(tree):
        dirs.sort()
        for name in sorted([*dirs, *names]):
            path = Path(folder, name)
            st = path.lstat()
            h.update(f"{path.relative_to(tree)}\0{st.st_mode:o}\0".encode())
            if path.is_symlink():
                h.update(os.readlink(path).encode() + b"\0")
            elif path.is_file():
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        h.update(chunk)
                h.update(b"\0")
    return h.hexdigest()


_CHECK = (
    "set -e; P={prefix}/bin/python{minor}; $P -c 'import ssl, sqlite3, ctypes, venv, sysconfig, sys; "
    'assert sysconfig.get_config_var("prefix") == "{prefix}", sysconfig.get_config_var("prefix"); '
    "print(sys.version.split()[0], ssl.OPENSSL_VERSION, sqlite3.sqlite_version)'; "
    "$P -m venv --without-pip /tmp/swebox-venv-check; cat /tmp/swebox-venv-check/pyvenv.cfg; "
    "grep -qx 'home = {prefix}/bin' /tmp/swebox-venv-check/pyvenv.cfg; "
    "/tmp/swebox-venv-check/bin/python -c 'import sys; assert sys.prefix != sys.base_prefix'"
)


def _check(tree: Path, minor: str, log: list[str]) -> None:
    command = _CHECK.format(prefix=layer_prefix(minor), minor=minor)
    check_layer(
        tree, f"python-{minor}-check", command, DEFAULT_ENV, log, f"python {minor}: the relocated interpreter's check"
    )


def python_layers(store: LayerStore) -> list[Manifest]:
    """The store's interpreter layers, newest version first."""
    found = [m for m in store.ls() if m.kind == "python"]
    return sorted(found, key=lambda m: tuple(int(x) for x in m.meta["version"].split(".")), reverse=True)


def find_python_layer(store: LayerStore, wanted: str) -> Manifest | None:
    """The newest interpreter layer of the store matching ``wanted`` ('3.9' or '3.9.18'), or None."""
    return next((m for m in python_layers(store) if matches(m.meta["version"], wanted)), None)


def import_python(store: LayerStore, path: str, *, work_dir: str = "/var/tmp", force: bool = False) -> Manifest:
    """The interpreter layer made from the installation at ``path``: reused when the store already holds the
    layer of this same install (its :meth:`PythonSource.fingerprint`) or of the same relocated content, else
    copied, relocated, checked in a sandbox and published (atomically, once across processes)."""
    source = probe(path)
    fingerprint = source.fingerprint()
    for manifest in python_layers(store):
        if manifest.meta.get("fingerprint") == fingerprint and not force:
            return manifest
    with tempfile.TemporaryDirectory(prefix=f"swebox-python-{source.version}-", dir=work_dir) as tmp:
        os.chmod(tmp, 0o755)  # the check sandbox's unprivileged root reads the tree
        tree = Path(tmp) / "layer"
        log = make_tree(source, tree)
        key = f"python-{source.version}-{tree_digest(tree)[:20]}"
        log.insert(0, f"# swebox interpreter layer {key}")

        def build(publish) -> Manifest:
            _check(tree, source.minor, log)
            return publish(
                layer_dir=tree,
                kind="python",
                log="\n".join(log) + "\n",
                meta={
                    "version": source.version,
                    "prefix": layer_prefix(source.minor),
                    "source": source.prefix,
                    "fingerprint": fingerprint,
                },
            )

        return store.build(key, build, force=force)
