"""What a sandbox's root is made of besides its layers: read-only binds of host folders and a minimal /etc."""

from __future__ import annotations

import os

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
        extra += [prefix for layer in layers for prefix in layer.interpreters]
    for path in dict.fromkeys(os.path.realpath(p) for p in extra):
        if any(path == s or path.startswith(s + "/") for s in system):
            continue  # already visible through a system bind (e.g. /usr/bin/python3)
        if not os.path.isdir(path):
            raise SandboxError(f"read-only bind {path!r}: expected a host directory, found "
                               f"{'a file' if os.path.exists(path) else 'nothing'}; bind its folder instead")
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


def check_searchable(folder: str) -> None:
    """The sandbox's unprivileged root must be able to reach its staging folder below `folder`."""
    path = os.path.realpath(folder)
    while True:
        if not os.stat(path).st_mode & 0o001:
            raise SandboxError(f"work_root {folder!r}: expected every folder on its path to be searchable by "
                               f"others (the sandbox runs as an unprivileged uid), found {path!r} without o+x; "
                               "use a work_root like /tmp/swebox-0 or `chmod o+x` that folder")
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
