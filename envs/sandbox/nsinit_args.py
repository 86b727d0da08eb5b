"""nsinit's command line: everything a sandbox's nsinit (csrc/nsinit.c, init.c) and its sessions (csrc/session.c)
need to know, built by the host before the zygote forks nsinit.

Two parts, separated by "--": nsinit's options (its namespaces, ids, cgroups and the trees it mounts in its
staging folder; then how it serves the sandbox: backend, writable layer, the sessions' environment), and the
options every session of the sandbox gets (binds, limits, the seccomp filter). Paths are host paths as nsinit sees them
before its root changes; nsinit finds the request's descriptors at fixed numbers: the control socket at
`CTL_FD`, then the archives, in order.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import sys

from . import extract, seccomp
from .idmap import Tree
from .layers import Layer
from .policy import SandboxPolicy

CTL_FD = 3  # zygote.c: FIRST_FD


def trees(etc_layer: str, layers: list[Layer], binds: list[dict]) -> list[tuple[str, int, str]]:
    """(kind, index, host path) of every tree nsinit mounts read-only, in the order nsinit expects their
    lowers: the etc layer, the layers (lowest first), the binds that are folders."""
    dirs = [b["src"] for b in binds if b["kind"] == "dir"]
    return [
        ("etc", 0, etc_layer),
        *(("layers", i, str(layer.path)) for i, layer in enumerate(layers)),
        *(("binds", i, src) for i, src in enumerate(dirs)),
    ]


def build(
    *,
    policy: SandboxPolicy,
    backend: str,
    staging: str,
    layers: list[Layer],
    archives: list[bool],
    binds: list[dict],
    etc_layer: str,
    tree_owners: list[Tree],
    rootless: bool,
    owner_uid: int,
    upper_size_mb: int,
    upper_inodes: int,
    cgroups: list[str],
    rlimits: dict[str, int],
) -> list[str]:
    """The command line; `archives[i]`: layer i's archive comes with the request (extract backend)."""
    nsinit = [
        "--ctl",
        str(CTL_FD),
        "--staging",
        staging,
        "--hostname",
        policy.hostname,
        "--map-self",
        str(int(rootless)),
        "--outer-uid",
        str(os.getuid()),
        "--outer-gid",
        str(os.getgid()),
        "--owner",
        str(owner_uid),
        "--layer-idmap",
        str(int(any(t.owner == "layer" for t in tree_owners))),
        "--etc",
        etc_layer,
        "--dumpable",
        str(int(rootless)),
        "--network",
        policy.network,
    ]
    for path in cgroups:
        nsinit += ["--cgroup", path]
    for layer in layers:
        nsinit += ["--layer", str(layer.path)]
    dir_binds = [b for b in binds if b["kind"] == "dir"]
    for bind in dir_binds:
        nsinit += ["--bind-dir", bind["src"], "--bind-at", bind["dst"]]
    for bind in binds:
        if bind["kind"] == "symlink":
            nsinit += ["--symlink-at", bind["dst"], "--symlink-to", bind["target"]]
    return [
        *nsinit,
        *_serving(policy, backend, staging, layers, archives, upper_size_mb, upper_inodes),
        "--",
        *_session(policy, staging, dir_binds, rlimits, rootless),
    ]


def _serving(
    policy: SandboxPolicy,
    backend: str,
    staging: str,
    layers: list[Layer],
    archives: list[bool],
    upper_size_mb: int,
    upper_inodes: int,
) -> list[str]:
    """How nsinit serves the sandbox (init.c): each slot's root and the sessions' environment."""
    # relative paths (from the staging folder) keep host paths out of the sandbox's /proc/self/mountinfo
    lowerdir = ":".join(reversed(["skel", "E", *(f"L{i}" for i in range(len(layers)))]))
    args = [
        "--backend",
        backend,
        "--upper-size-mb",
        str(upper_size_mb),
        "--upper-inodes",
        str(upper_inodes),
        "--lowerdir",
        lowerdir,
        # extract would hold two private copies, fuse two daemons: only overlay keeps a spare session
        "--warm-reset",
        str(int(policy.warm_reset and backend == "overlay")),
    ]
    for name, value in policy.env.items():
        args += ["--env", f"{name}={value}"]
    if backend == "extract":  # the copy is extract.py's, run as a helper with the target appended
        positions = iter(range(CTL_FD + 1, CTL_FD + 1 + sum(archives)))
        spec = {
            "bases": [os.path.join(staging, "skel"), os.path.join(staging, "E")],
            "layers": [
                {"path": str(layer.path), "archive_fd": next(positions) if sent else -1}
                for layer, sent in zip(layers, archives, strict=True)
            ],
            "lowers": [os.path.join(staging, f"L{i}") for i in range(len(layers))],
        }
        # nsinit runs the first of these that the sandbox's uid may run (csrc/nsinit.c)
        for python in dict.fromkeys(
            filter(None, (sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3"))
        ):
            args += ["--extract-python", python]
        for arg in ("-I", "-S", extract.__file__, json.dumps(spec)):
            args += ["--extract-arg", arg]
    return args


def _session(
    policy: SandboxPolicy, staging: str, dir_binds: list[dict], rlimits: dict[str, int], rootless: bool
) -> list[str]:
    """The session program's options that are the same for every session of the sandbox (csrc/session.c)."""
    program, note = _filter(policy.seccomp, policy.seccomp_allow_ptrace)
    args = [
        "--dev",
        os.path.join(staging, "dev"),
        "--tmp-size-mb",
        str(policy.tmp_size_mb),
        "--tmp-inodes",
        str(policy.tmp_inodes),
        "--max-output",
        str(int(policy.max_output_bytes)),
        "--dumpable",
        str(int(rootless)),
        "--workdir",
        str(policy.workdir or "/"),
        "--seccomp-note",
        note,
        "--seccomp-filter",
        program.hex(),
    ]
    for i, bind in enumerate(dir_binds):
        args += ["--bind-from", os.path.join(staging, f"B{i}"), "--bind-to", bind["dst"]]
    for name, value in rlimits.items():
        args += ["--rlimit", f"{getattr(resource, name)}={value}"]
    return args


@functools.cache
def _filter(enabled: bool, allow_tracing: bool) -> tuple[bytes, str]:
    return seccomp.filter_for(enabled, allow_tracing)
