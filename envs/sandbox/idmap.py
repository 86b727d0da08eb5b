"""A sandbox's id maps, and the read-only trees (layers, binds) it mounts, id-mapped onto its host ids.

As host root, the sandbox's ids 0..uid_count-1 map to a host id block of its own (uidslots.py). Its trees are
cloned here (host root can reach /root/.pyenv, the sandbox's uid cannot), made read-only and id-mapped so that
they show as the sandbox's root's:

- a tree owned by host root (the system folders, interpreter prefixes, snapshots: they store ids relative to
  their sandbox) through the sandbox's own namespace: host id k shows as k;
- a tree owned by the *layer ids* (`policy.host_uid` + k: a cache's squashfs and tar layers are packed so)
  through the namespace of a helper nsinit forks for it, mapped `host_uid -> block`: layer id host_uid + k
  shows as k. These go first: a filesystem that cannot be id-mapped (FUSE: squashfuse) makes the sandbox map to
  the layer ids themselves instead (shared by such sandboxes), decided before its own map is written, which
  the kernel allows once;
- any other tree is only made read-only (its files show as nobody).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import syscalls
from .policy import SandboxPolicy


@dataclass(frozen=True)
class Tree:
    kind: str
    """"etc", "layers" or "binds": what the tree is for (nsinit_args.trees)."""
    index: int
    """Its place in that list."""
    path: str
    """The host folder."""
    owner: str
    """"root" (host root's), "layer" (the layer ids'), or "other"."""


@dataclass
class Mapped:
    fds: list[int]
    """Detached mounts, one per tree in order, for nsinit to move into place."""
    host_uid: int
    """The host uid the sandbox's root now is: its block's first, or policy.host_uid when shared."""
    shared_why: str
    """Why the sandbox maps to the shared layer ids ("" when it has its block)."""


def classify(trees: list[tuple[str, int, str]], policy: SandboxPolicy) -> list[Tree]:
    """(kind, index, host path) -> Tree, with who owns the tree's top folder."""
    out = []
    for kind, index, path in trees:
        uid = os.stat(path).st_uid
        layer_ids = policy.host_uid <= uid < policy.host_uid + policy.uid_count
        out.append(Tree(kind, index, path, "root" if uid == 0 else "layer" if layer_ids else "other"))
    return out


def map_ids(pid: int, layer_ns_pid: int, trees: list[Tree], policy: SandboxPolicy, block: int) -> Mapped:
    """Write the id maps of nsinit `pid`'s user namespace and prepare every tree (see the module's doc)."""
    prepared: dict[Tree, int] = {}
    host_uid, why = block, ""
    try:
        if layer_ns_pid:
            why = _map_layer_trees(layer_ns_pid, trees, policy, block, prepared)
            if why:
                host_uid = policy.host_uid
        _write_maps(pid, f"0 {host_uid} {policy.uid_count}")
        userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            for tree in trees:
                if tree not in prepared:
                    prepared[tree] = read_only_tree(tree.path, userns if tree.owner == "root" else -1)
        finally:
            os.close(userns)
    except BaseException:
        for fd in prepared.values():
            os.close(fd)
        raise
    return Mapped([prepared[tree] for tree in trees], host_uid, why)


def _map_layer_trees(
    layer_ns_pid: int, trees: list[Tree], policy: SandboxPolicy, block: int, prepared: dict[Tree, int]
) -> str:
    """Id-map the layer ids' trees onto `block`; on the first that cannot be, undo and say why."""
    _write_maps(layer_ns_pid, f"{policy.host_uid} {block} {policy.uid_count}")
    userns = os.open(f"/proc/{layer_ns_pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        for tree in trees:
            if tree.owner != "layer":
                continue
            try:
                prepared[tree] = read_only_tree(tree.path, userns, required=True)
            except OSError as exc:
                for fd in prepared.values():
                    os.close(fd)
                prepared.clear()
                return f"layer {tree.path} cannot be id-mapped ({exc.strerror or exc})"
    finally:
        os.close(userns)
    return ""


def _write_maps(pid: int, line: str) -> None:
    for kind in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{kind}", "w") as f:
            f.write(line)


def read_only_tree(path: str, userns: int, required: bool = False) -> int:
    """A detached, read-only clone of the tree at `path`, id-mapped through `userns` when >= 0 (where its
    filesystem cannot be, its files show as nobody, unless `required`: then OSError)."""
    fd = syscalls.open_tree(path, syscalls.OPEN_TREE_CLONE | syscalls.OPEN_TREE_CLOEXEC | syscalls.AT_RECURSIVE)
    readonly = syscalls.MOUNT_ATTR_RDONLY | syscalls.MOUNT_ATTR_NODEV
    try:
        if userns >= 0:
            try:
                syscalls.mount_setattr(fd, readonly | syscalls.MOUNT_ATTR_IDMAP, userns)
                return fd
            except OSError:
                if required:
                    raise
        syscalls.mount_setattr(fd, readonly)
    except BaseException:
        os.close(fd)
        raise
    return fd
