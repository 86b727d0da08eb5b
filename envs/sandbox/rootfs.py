"""What a sandbox's root is made of besides its layers: read-only binds of host folders and a minimal /etc."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time

from .layers import Layer
from .policy import SandboxError, SandboxPolicy


def binds(policy: SandboxPolicy, layers: list[Layer]) -> list[dict]:
    """Host folders to bind read-only (system folders unless a layer brings its own, interpreters, extras);
    a system path that is a symlink (/bin -> usr/bin) becomes the same symlink."""
    binds = []
    for path in policy.system_paths:
        if not os.path.lexists(path) or any(provides(layer, path) for layer in layers):
            continue
        if os.path.islink(path):
            binds.append({"kind": "symlink", "dst": path, "target": os.readlink(path)})
        elif os.path.isdir(path):
            binds.append({"kind": "dir", "src": path, "dst": path})
    system = [b["dst"] for b in binds]
    extra = list(policy.ro_binds)
    if policy.auto_bind_interpreters:
        extra += [prefix for layer in layers for prefix in layer.interpreters or ()]
    for path in dict.fromkeys(os.path.realpath(p) for p in extra):
        if any(path == s or path.startswith(s + "/") for s in system):
            continue  # already visible through a system bind (e.g. /usr/bin/python3)
        if not os.path.isdir(path):
            raise SandboxError(
                f"read-only bind {path!r}: expected a host directory, found "
                f"{'a file' if os.path.exists(path) else 'nothing'}; bind its folder instead"
            )
        binds.append({"kind": "dir", "src": path, "dst": path})
    return binds


def minimal_etc(policy: SandboxPolicy) -> dict:
    """The sandbox's /etc: generated accounts and name resolution, plus copies of harmless host entries."""
    etc: dict = {
        "passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": "root:x:0:\nnogroup:x:65534:\n",
        "hostname": policy.hostname + "\n",
        "hosts": f"127.0.0.1 localhost\n::1 localhost\n127.0.1.1 {policy.hostname}\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
        "resolv.conf": "",
    }
    if policy.network == "user":
        etc["resolv.conf"] = "nameserver 10.0.2.3\n"  # slirp4netns's DNS forwarder (usernet.py)
    for name in policy.etc_files:
        if os.path.lexists(f"/etc/{name}"):
            etc[name] = {"copy": f"/etc/{name}"}
    return etc


def etc_cache_root() -> str:
    """Where etc layers live: $SWEBOX_ETC_CACHE, else /var/tmp/swebox-etc-<uid> (shared by every job of the user:
    a layer is named by its content and published atomically). Not in the work root, which holds per-sandbox
    folders only and is empty when no sandbox is open."""
    return os.environ.get("SWEBOX_ETC_CACHE") or f"/var/tmp/swebox-etc-{os.geteuid()}"


def own_folder(path: str, what: str, variable: str) -> None:
    """Create `path` or check that it is ours alone: a folder someone else made in /var/tmp could hold a planted
    /etc (an ld.so.conf pointing at their libraries) or session binary. `what` and the environment `variable`
    that moves it name it in the error."""
    os.makedirs(path, mode=0o711, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"{what} {path!r}: expected a folder owned by uid {os.geteuid()} that only it "
            f"can write, found mode {stat.filemode(st.st_mode)} owned by uid {st.st_uid}; remove it "
            f"or set {variable} to a folder of your own"
        )


# A start would spend ~0.8 ms fingerprinting the host's /etc entries (the lstat of ~700 entries); the answer is
# kept for this long, so a change to the host's /etc reaches the sandboxes started at most this much later
ETC_RECHECK_S = 1.0
_etc_checked: dict[tuple[str, str], tuple[float, str]] = {}  # (root, etc as JSON) -> (when checked, folder)
_etc_lock = threading.Lock()
_now = time.monotonic  # (tests move the clock)


def etc_layer(policy: SandboxPolicy, root: str | None = None) -> str:
    """A folder holding the sandbox's minimal /etc (``<folder>/etc``), built once per host and reused.

    Named by its content: the generated entries and, for each copied host entry, the lstat of it and of every
    folder below it (an entry added, removed or replaced there changes its folder; ``ldconfig`` and
    ``update-ca-certificates`` replace files). Built in a temporary sibling and renamed into place, so a
    reader sees a whole tree or none; owned by host root and mounted read-only as the lowest layer but one.
    ``root``: the folder of etc layers (default :func:`etc_cache_root`).
    A file edited in place inside a copied folder (not replaced) is not noticed until that folder changes, and a
    process reuses its last answer for ETC_RECHECK_S seconds."""
    etc = minimal_etc(policy)
    root = root or etc_cache_root()
    key = (root, json.dumps(etc, sort_keys=True))
    with _etc_lock:
        checked, folder = _etc_checked.get(key, (-ETC_RECHECK_S, ""))
    if _now() - checked < ETC_RECHECK_S and os.path.isdir(folder):
        return folder
    folder = _built_etc_layer(etc, key[1], root)
    with _etc_lock:
        _etc_checked[key] = (_now(), folder)
    return folder


def _built_etc_layer(etc: dict, etc_json: str, root: str) -> str:
    """The folder of `etc`'s layer under `root`, built now if it is not there."""
    digest = hashlib.sha256(etc_json.encode())
    for content in etc.values():
        if isinstance(content, dict):
            _fingerprint(content["copy"], digest)
    own_folder(root, "etc layer folder", "SWEBOX_ETC_CACHE")
    folder = os.path.join(root, digest.hexdigest()[:32])
    if os.path.isdir(folder):
        return folder
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=root)
    try:
        os.chmod(tmp, 0o755)
        _write_etc(os.path.join(tmp, "etc"), etc)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process put the same tree there first
            if not os.path.isdir(folder):
                raise
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _fingerprint(path: str, digest) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    digest.update(f"{path}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0".encode())
    if stat.S_ISLNK(st.st_mode) and os.path.isdir(path):  # copied as the folder it names
        _fingerprint(os.path.realpath(path), digest)
    elif stat.S_ISDIR(st.st_mode):
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    _fingerprint(entry.path, digest)


def _write_etc(root: str, etc: dict) -> None:
    os.makedirs(root, mode=0o755)
    for name, content in etc.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if isinstance(content, str):
            with open(path, "w") as f:
                f.write(content)
            os.chmod(path, 0o644)
        elif os.path.isdir(content["copy"]):
            shutil.copytree(content["copy"], path, symlinks=True, ignore_dangling_symlinks=True)
        elif os.path.islink(content["copy"]):
            os.symlink(os.readlink(content["copy"]), path)
        elif os.path.exists(content["copy"]):
            shutil.copyfile(content["copy"], path)
            os.chmod(path, 0o644)


def check_searchable(folder: str) -> None:
    """The sandbox's unprivileged root must be able to reach its staging folder below `folder`."""
    path = os.path.realpath(folder)
    while True:
        if not os.stat(path).st_mode & 0o001:
            raise SandboxError(
                f"work_root {folder!r}: expected every folder on its path to be searchable by "
                f"others (the sandbox runs as an unprivileged uid), found {path!r} without o+x; "
                "use a work_root like /tmp/swebox-0 or `chmod o+x` that folder"
            )
        if path == "/":
            return
        path = os.path.dirname(path)


def provides(layer: Layer, path: str) -> bool:
    """Whether `layer` brings its own, non-empty copy of the system folder `path` (then the host's is not bound)."""
    folder = str(layer.path) + path
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    with os.scandir(folder) as entries:
        return any(True for _ in entries)
