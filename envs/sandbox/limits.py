"""Resource limits: cgroups where the host allows them, rlimits always.

cgroups are created beneath the cgroup this process is in (read from /proc/self/cgroup), never elsewhere.
cgroup v2 (one unified hierarchy with the memory and pids controllers enabled for children, and cpu where
enabled) is preferred; on hybrid hosts the v1 memory, pids and cpu hierarchies are used. Without either
(rootless, no delegation), memory falls back to a per-process RLIMIT_AS and processes to RLIMIT_NPROC, which
the kernel counts per user namespace, so per sandbox. A memory cgroup's limit covers the sandbox's tmpfs sizes
as well (SandboxPolicy.cgroup_memory_mb): tmpfs pages are charged to it, and a limit below them made a full disk
an OOM kill of the whole sandbox instead of ENOSPC.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

from .policy import SandboxPolicy

CGROUP_ROOT = "/sys/fs/cgroup"
MB = 1024 * 1024


def _own_cgroups() -> dict[str, str]:
    """controller name (or "" for v2) -> this process's cgroup path in that hierarchy."""
    paths = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _id, controllers, path = line.rstrip("\n").split(":", 2)
                for name in controllers.split(",") if controllers else [""]:
                    paths[name] = path
    except OSError:
        pass
    return paths


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


@dataclass
class Limits:
    """The limits in force for one sandbox, and the cgroups that enforce some of them."""

    policy: SandboxPolicy
    cgroup_dirs: list[str] = field(default_factory=list)
    enforced_by: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, policy: SandboxPolicy, name: str) -> Limits:
        limits = cls(policy)
        if policy.use_cgroups:
            limits._create_cgroups(name)
        limits.enforced_by.setdefault(
            "cpu_share", "none: per process, like any host process" if policy.cpu_weight else "none: cpu_weight=0"
        )
        limits.enforced_by.setdefault("memory", "rlimit RLIMIT_AS (per process)")
        limits.enforced_by.setdefault("processes", "rlimit RLIMIT_NPROC (per sandbox user namespace)")
        limits.enforced_by["cpu_seconds"] = "rlimit RLIMIT_CPU (per process)"
        limits.enforced_by["file_size"] = "rlimit RLIMIT_FSIZE"
        limits.enforced_by["open_files"] = "rlimit RLIMIT_NOFILE"
        limits.enforced_by["disk"] = (
            f"tmpfs size={policy.upper_size_mb}m,nr_inodes={policy.upper_inodes} for the "
            f"writable layer; size={policy.tmp_size_mb}m,nr_inodes={policy.tmp_inodes} "
            "for /tmp and /dev/shm each"
        )
        limits.enforced_by["wall_clock"] = "per-command timeout (process tree killed)"
        return limits

    def _create_cgroups(self, name: str) -> None:
        own = _own_cgroups()
        unified = os.path.join(CGROUP_ROOT, "cgroup.controllers")
        if os.path.exists(unified) and "" in own:  # pure cgroup v2
            parent = os.path.join(CGROUP_ROOT, own[""].lstrip("/"))
            try:
                with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                    enabled = f.read().split()
            except OSError:
                enabled = []
            if {"memory", "pids"} <= set(enabled) and _writable(parent):
                path = os.path.join(parent, name)
                weight = self.policy.cpu_weight if "cpu" in enabled else 0
                try:
                    os.mkdir(path)
                    _write(path, "memory.max", self.policy.cgroup_memory_mb * MB)
                    _write(path, "memory.swap.max", 0, missing_ok=True)
                    _write(path, "pids.max", self.policy.max_processes)
                    if weight:
                        _write(path, "cpu.weight", weight)
                except OSError:
                    _rmdir(path)
                    return
                self.cgroup_dirs.append(path)
                self.enforced_by["memory"] = f"cgroup v2 memory.max ({path})"
                self.enforced_by["processes"] = f"cgroup v2 pids.max ({path})"
                if weight:
                    self.enforced_by["cpu_share"] = f"cgroup v2 cpu.weight={weight} ({path})"
            return
        controllers = [
            ("memory", {"memory.limit_in_bytes": self.policy.cgroup_memory_mb * MB}),
            ("pids", {"pids.max": self.policy.max_processes}),
        ]
        if self.policy.cpu_weight:  # a group of its own: the scheduler shares CPU between groups first
            controllers.append(("cpu", {"cpu.shares": max(2, self.policy.cpu_weight * 1024 // 100)}))
        controllers.append(("cpuacct", {}))  # no limit: the sandbox's CPU seconds (usage.py) come from it
        for controller, files in controllers:
            if controller not in own:
                continue
            parent = os.path.join(CGROUP_ROOT, controller, own[controller].lstrip("/"))
            if not _writable(parent):
                continue
            path = os.path.join(parent, name)
            if os.path.realpath(path) in {os.path.realpath(d) for d in self.cgroup_dirs}:
                continue  # cpu and cpuacct mounted together: the cpu group already accounts
            try:
                os.mkdir(path)
                for key, value in files.items():
                    _write(path, key, value)
                if controller == "memory":  # no swap beyond the limit, when swap accounting exists
                    _write(path, "memory.memsw.limit_in_bytes", self.policy.cgroup_memory_mb * MB, missing_ok=True)
            except OSError:
                _rmdir(path)
                continue
            self.cgroup_dirs.append(path)
            limit = {"memory": "memory", "pids": "processes", "cpu": "cpu_share"}.get(controller)
            if limit:
                self.enforced_by[limit] = f"cgroup v1 {controller} ({path})"

    def rlimits(self) -> dict[str, int]:
        p = self.policy
        limits = {
            "RLIMIT_CPU": p.cpu_seconds,
            "RLIMIT_FSIZE": p.max_file_mb * MB,
            "RLIMIT_NOFILE": p.max_open_files,
            "RLIMIT_CORE": 0,
            "RLIMIT_NPROC": p.max_processes,
        }
        if not self.enforced_by["memory"].startswith("cgroup"):
            limits["RLIMIT_AS"] = p.memory_mb * MB
        return limits

    def release(self) -> None:
        """Kill anything left in the cgroups, then remove them."""
        for path in self.cgroup_dirs:
            for _ in range(100):
                pids = _read_pids(path)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.005)
            _rmdir(path)
        self.cgroup_dirs = []


def _write(path: str, key: str, value: int, missing_ok: bool = False) -> None:
    target = os.path.join(path, key)
    if missing_ok and not os.path.exists(target):
        return
    with open(target, "w") as f:
        f.write(str(value))


def _read_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _rmdir(path: str) -> None:
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def pid_namespace() -> int:
    """This process's PID namespace (the inode of /proc/self/ns/pid): a pid in a cgroup's name means something
    only in the namespace that named it."""
    return os.stat("/proc/self/ns/pid").st_ino


def sweep_stale_cgroups(prefix: str) -> None:
    """Remove empty cgroups named `prefix<our PID namespace>-<pid>-*` whose owner pid is dead, left by a crashed
    process. Jobs in other PID namespaces (containers, CI runners) share the cgroup tree, but a pid of theirs
    means nothing here: their cgroups are theirs to sweep (a fresh one is empty until its nsinit joins it)."""
    ours = f"{prefix}{pid_namespace()}-"
    own = _own_cgroups()
    parents = [
        os.path.join(CGROUP_ROOT, c, own[c].lstrip("/")) for c in ("memory", "pids", "cpu", "cpuacct") if c in own
    ]
    if "" in own and os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
        parents.append(os.path.join(CGROUP_ROOT, own[""].lstrip("/")))
    for parent in parents:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(ours)]
        except OSError:
            continue
        for name in names:
            owner = name[len(ours) :].split("-", 1)[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                _rmdir(os.path.join(parent, name))
