"""Debian packages as layer content, without root: resolve a dependency closure, download and unpack it.

Resolution asks apt (``apt-get -s install``) against an empty dpkg status, so it names every package the
roots need, not only what this host lacks; :func:`host_packages` then says what the host's ``/usr`` (bound
into every sandbox) already provides. ``apt-get download`` fetches into the current folder as any user, and
``dpkg-deb -x`` unpacks without running maintainer scripts. apt's package lists must be current (``apt-get
update`` as root, once); the archive is the only network this needs.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

_INST = re.compile(r"^Inst (?P<name>\S+) (?:\[[^\]]*\] )?\((?P<version>\S+) .*\[(?P<arch>[a-z0-9]+)\]\)")


class DebError(RuntimeError):
    """apt or dpkg-deb refused: the message quotes its output and says how to fix it."""


@dataclass(frozen=True)
class Deb:
    """One Debian binary package at one version."""

    name: str
    """Package name ('nodejs')."""
    version: str
    """Exact version ('18.20.4+dfsg-1~deb12u3')."""
    arch: str
    """'amd64' or 'all'."""
    sha256: str
    """Hex sha256 of the .deb, from the archive's index (checked after download)."""
    size: int
    """Bytes of the .deb."""

    def to_dict(self) -> dict[str, object]:
        return {
            "package": self.name,
            "version": self.version,
            "arch": self.arch,
            "sha256": self.sha256,
            "size": self.size,
        }


def _run(argv: list[str], what: str, cwd: str | None = None, timeout: float = 1800) -> str:
    env = {**os.environ, "LC_ALL": "C"}
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise DebError(
            f"{what}: `{' '.join(argv[:6])} ...` exited {proc.returncode}:\n{tail}\n(check the "
            "package names and that apt's lists are current: `apt-get update` as root)"
        )
    return proc.stdout


def resolve(roots: tuple[str, ...]) -> list[Deb]:
    """Every package ``roots`` need (Depends and Pre-Depends, no Recommends), at the candidate versions of
    apt's lists, as if nothing were installed; sorted by name."""
    with tempfile.NamedTemporaryFile(prefix="swebox-empty-dpkg-status-") as empty:
        out = _run(
            [
                "apt-get",
                "-s",
                "-q",
                "-o",
                f"Dir::State::status={empty.name}",
                "-o",
                "Debug::NoLocking=1",
                "install",
                "--no-install-recommends",
                *roots,
            ],
            f"resolving {' '.join(roots)}",
        )
    found = {m["name"].split(":")[0]: (m["version"], m["arch"]) for m in map(_INST.match, out.splitlines()) if m}
    if not found:
        raise DebError(f"resolving {' '.join(roots)}: apt planned no installs; expected at least the roots")
    return sorted(_index_entries(found), key=lambda d: d.name)


def _index_entries(wanted: dict[str, tuple[str, str]]) -> list[Deb]:
    """SHA256 and Size of each (name, version) from apt's index (``apt-cache show NAME=VERSION``)."""
    out = _run(["apt-cache", "show", *(f"{n}={v}" for n, (v, _) in sorted(wanted.items()))], "reading the index")
    debs: dict[str, Deb] = {}
    for record in out.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line and line[0] != " ")
        name = fields.get("Package", "")
        if name in wanted and name not in debs and fields.get("Version") == wanted[name][0]:
            debs[name] = Deb(
                name,
                fields["Version"],
                fields.get("Architecture", wanted[name][1]),
                fields["SHA256"],
                int(fields["Size"]),
            )
    missing = sorted(set(wanted) - set(debs))
    if missing:
        raise DebError(f"apt's index has no SHA256 for {', '.join(missing)}; run `apt-get update` as root")
    return list(debs.values())


def host_packages() -> dict[str, str]:
    """Packages installed on this host (name -> version): what its bound /usr provides to sandboxes."""
    out = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n"], "listing host packages")
    rows = (line.split("\t") for line in out.splitlines())
    return {r[0].split(":")[0]: r[1] for r in rows if len(r) == 3 and r[2] == "installed"}


def download(debs: list[Deb], folder: Path) -> list[Path]:
    """Fetch ``debs`` into ``folder`` (as any user) and check each file's sha256 against the index."""
    _run(["apt-get", "download", "-q", *(f"{d.name}={d.version}" for d in debs)], "downloading", cwd=str(folder))
    files = []
    for deb in debs:
        matches = [p for p in folder.glob(f"{deb.name}_*.deb") if _digest(p) == deb.sha256]
        if not matches:
            raise DebError(
                f"downloaded {deb.name} {deb.version}: no .deb in {folder} has the index's sha256 "
                f"{deb.sha256}; run `apt-get update` as root and build again"
            )
        files.append(matches[0])
    return files


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def extract(deb: Path, target: Path) -> None:
    """Unpack ``deb``'s files into ``target`` (no maintainer scripts run)."""
    _run(["dpkg-deb", "-x", str(deb), str(target)], f"unpacking {deb.name}")


def relink(tree: Path, prefix: str) -> int:
    """Point ``tree``'s symlinks where they lead once the tree appears at ``prefix`` in a sandbox whose /usr is
    the host's: a link whose target (read as if the tree were at /) the tree holds names the prefix's copy; one
    whose target the tree lacks names the host's path (a dependency the host provides, e.g. maven's
    ``boot/plexus-classworlds.jar -> ../../java/...`` once that jar's package is the host's). Returns how
    many were changed."""
    changed = 0
    for folder, dirs, names in os.walk(tree):
        for name in dirs + names:
            link = Path(folder, name)
            if not link.is_symlink():
                continue
            target = os.readlink(link)
            as_root = os.path.normpath(os.path.join("/", os.path.relpath(folder, tree), target))
            inside = os.path.lexists(tree / as_root.lstrip("/"))
            if target.startswith("/") and inside:
                new = prefix.rstrip("/") + target
            elif not target.startswith("/") and not inside:
                new = as_root
            else:
                continue
            link.unlink()
            link.symlink_to(new)
            changed += 1
    return changed


def patch_paths(tree: Path, old: str, new: str) -> list[str]:
    """Replace the absolute path ``old`` by ``new`` (same length, so offsets stay) in every ELF file of
    ``tree``; returns the files changed, relative to ``tree``."""
    if len(old) != len(new):
        raise ValueError(
            f"patch_paths: expected paths of one length; found {old!r} ({len(old)}) and "
            f"{new!r} ({len(new)}). Choose an alias of {len(old)} characters."
        )
    changed = []
    for folder, _, names in os.walk(tree):
        for name in names:
            path = Path(folder, name)
            if path.is_symlink() or not path.is_file():
                continue
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            data = path.read_bytes()
            if old.encode() in data:
                os.chmod(path, path.stat().st_mode | 0o200)  # dpkg-deb keeps modes: some files are 0444
                path.write_bytes(data.replace(old.encode(), new.encode()))
                changed.append(str(path.relative_to(tree)))
    return changed
