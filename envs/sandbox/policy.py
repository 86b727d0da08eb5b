"""SandboxPolicy: the explicit, serialisable policy a sandbox enforces. Safe by default.

The mechanism (namespaces, mounts, the shell) lives elsewhere; this module only says what is allowed.
A policy travels in configs and Ray calls, so it round-trips to a plain dict.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .strict import strict_from_dict

BACKENDS = ("auto", "overlay", "fuse-overlayfs", "extract")
NETWORKS = ("none", "user")

DEFAULT_ENV = {
    "PATH": "/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
}


class SandboxError(RuntimeError):
    """A sandbox could not do what was asked. The message says what was expected, what happened, and how to fix."""


@dataclass
class SandboxPolicy:
    """What a sandbox may do and use. Every limit is on by default."""

    backend: str = "auto"
    """Copy-on-write mechanism: "overlay" (kernel overlayfs, ms resets), "fuse-overlayfs", "extract" (copy or
    unpack every layer on each start/reset, the paper's per-rollout restore: the baseline for benchmarks), or
    "auto" (the first of overlay, fuse-overlayfs, extract that works on this host)."""

    network: str = "none"
    """"none": a private network namespace with only loopback up; "user": the same, plus outbound network
    through a user-mode stack (slirp4netns, see usernet.py) for build steps. Never the host's network namespace.
    "host", the older name of "user", is read as "user"."""

    network_host_loopback: bool = False
    """With network="user": let the sandbox reach the host's loopback at 10.0.2.2 (a package index or proxy bound
    to 127.0.0.1). Every loopback port of the host is then reachable from it: only for trusted build steps."""

    memory_mb: int = 4096
    """Memory limit for all processes of the sandbox together (cgroup), or per process (RLIMIT_AS) as fallback.
    The sandbox's tmpfs pages (writable layer, /tmp, /dev/shm) are charged to its cgroup too, so the cgroup's
    limit is this plus their sizes (:attr:`cgroup_memory_mb`): a full disk is ENOSPC, never an OOM kill."""

    max_processes: int = 512
    """Maximum number of processes/threads alive at once in the sandbox (cgroup pids, or RLIMIT_NPROC)."""

    cpu_seconds: int = 3600
    """CPU seconds any one process may use (RLIMIT_CPU); wall-clock is bounded per command by the timeout."""

    max_file_mb: int = 1024
    """Largest file a process may write (RLIMIT_FSIZE)."""

    upper_size_mb: int = 2048
    """Size of the writable layer (a tmpfs): a full disk inside never fills the host's."""

    tmp_size_mb: int = 512
    """Size of the private /tmp and /dev/shm tmpfs each."""

    upper_inodes: int = 262_144
    """Most files, folders and links the writable layer holds (its tmpfs's nr_inodes; the extract backend adds
    the layers' own count). Past it a create fails with ENOSPC inside and the sandbox goes on; a snapshot copies
    each entry as a host file, so this also caps what one snapshot or fork adds to the host's inodes (a tmpfs
    left at the kernel's default would take half the RAM's pages, millions of inodes)."""

    tmp_inodes: int = 131_072
    """Most files, folders and links each of the private /tmp and /dev/shm holds (their tmpfs's nr_inodes)."""

    max_open_files: int = 4096
    """RLIMIT_NOFILE for every process."""

    command_timeout_s: float = 300.0
    """Default wall-clock limit of one exec() when the call gives none."""

    max_output_bytes: int = 1_000_000
    """Most bytes of output kept per exec (half from the head, half from the tail)."""

    host_uid: int = 100000
    """When the host process is root: the first of the *layer ids*, the host uids (and gids) that layers' files
    are owned by (the cache packs squashfs and tar layers as 100000, `MAPPED_ROOT_UID`). A sandbox's own ids map
    to a block of its own above them (uid_slots) and the layers are id-mapped onto it; where a layer's filesystem
    cannot be id-mapped, that sandbox's uid 0 maps to host_uid itself (shared by such sandboxes)."""

    uid_count: int = 65536
    """When the host process is root: how many ids (from 0) a sandbox's user namespace maps, and so the size of
    the layer ids' range and of each sandbox's block."""

    uid_slots: int = 1024
    """When the host process is root: how many sandboxes may be live on this host at once. Slot k gives a sandbox
    a user namespace owned by host uid `host_uid + uid_count + k` (mapped by no sandbox) and the id block
    `host_uid + uid_count + uid_slots + k * uid_count` for its processes and files, so per-user kernel budgets
    (pipe buffers, inotify, processes, message queues) are per sandbox (uidslots.py). The whole range, from
    host_uid to the last block's end, must be used by nothing else on the host (other policies, /etc/subuid)."""

    cpu_weight: int = 100
    """CPU share of the sandbox against other sandboxes (cgroup cpu.weight, 1..10000; v1 cpu.shares = weight *
    1024 / 100): every sandbox gets an equal share under contention however many processes it runs. 0: no CPU
    cgroup (the share is then per process, as for any host process)."""

    hostname: str = "sandbox"
    """Hostname inside the sandbox's UTS namespace."""

    ro_binds: tuple[str, ...] = ()
    """Extra host paths made visible read-only at the same path (e.g. an interpreter prefix for a build)."""

    auto_bind_interpreters: bool = True
    """Bind, read-only, the interpreter prefixes each layer declares (`Layer.interpreters`, recorded by the
    layer's maker: the env builder's manifest). Nothing in a layer's tree (a pyvenv.cfg) is ever trusted for it."""

    system_paths: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
    """Host system folders bound read-only (a symlink such as /bin -> usr/bin is recreated as a symlink),
    unless a layer brings its own."""

    etc_files: tuple[str, ...] = (
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "localtime",
        "alternatives",
        "ssl/certs",
        "ssl/openssl.cnf",
        "ca-certificates",
        "mime.types",
        "protocols",
        "services",
    )
    """Entries of the host's /etc copied into the sandbox's minimal /etc (passwd, group, hosts, resolv.conf
    and nsswitch.conf are generated). Nothing else of the host's /etc is visible."""

    env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV))
    """Environment of the sandbox's shell; nothing is inherited from the host process."""

    workdir: str = "/"
    """Working directory of each new shell (an image's WorkingDir); "/" when it does not exist."""

    seccomp: bool = True
    """Install a seccomp-bpf filter on every process of the sandbox: keyrings, bpf, perf_event_open, io_uring,
    userfaultfd, mounts, namespace creation, module loading, kexec, the clock and the kernel log fail with EPERM
    (see docs/sandbox.md). Safe for test suites, which need none of these; False only to debug the filter."""

    seccomp_allow_ptrace: bool = False
    """With seccomp on: allow ptrace and process_vm_readv/writev (for suites that run strace, gdb or py-spy).
    Denied by default: rootless, ptrace would let the agent tamper with its own supervisor."""

    warm_reset: bool = True
    """After a sandbox's first reset(), keep the next session prepared (a fresh writable layer and a started
    shell, overlay backend only), so that every later reset is a swap (~1 ms instead of ~10). Costs one idle
    session (2 processes of max_processes: its pid 1 and shell; ~0.5 MB PSS) in each sandbox that
    was reset once; nothing in the others. Back-to-back resets (under 20 ms apart) find none ready: ~10 ms each."""

    use_cgroups: bool = True
    """Use cgroups (v2, or v1 memory+pids) for memory and process limits where the host allows."""

    work_root: str = ""
    """Host folder for per-sandbox working state; "" means $SWEBOX_WORK_ROOT or /tmp/swebox-<uid>."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SandboxError(f"SandboxPolicy.backend: expected one of {BACKENDS}, found {self.backend!r}")
        if self.network == "host":  # the older name: builds never share the host's namespace any more
            self.network = "user"
        if self.network not in NETWORKS:
            raise SandboxError(f"SandboxPolicy.network: expected one of {NETWORKS}, found {self.network!r}")
        for name in (
            "memory_mb",
            "max_processes",
            "cpu_seconds",
            "max_file_mb",
            "upper_size_mb",
            "tmp_size_mb",
            "max_open_files",
            "max_output_bytes",
            "uid_count",
            "upper_inodes",
            "tmp_inodes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise SandboxError(f"SandboxPolicy.{name}: expected a positive integer, found {value!r}")
        for name in (
            "seccomp",
            "seccomp_allow_ptrace",
            "use_cgroups",
            "auto_bind_interpreters",
            "network_host_loopback",
        ):
            if not isinstance(getattr(self, name), bool):
                raise SandboxError(f"SandboxPolicy.{name}: expected True or False, found {getattr(self, name)!r}")
        if not isinstance(self.uid_slots, int) or self.uid_slots <= 0:
            raise SandboxError(f"SandboxPolicy.uid_slots: expected a positive integer, found {self.uid_slots!r}")
        if not isinstance(self.cpu_weight, int) or not 0 <= self.cpu_weight <= 10000:
            raise SandboxError(
                f"SandboxPolicy.cpu_weight: expected an integer from 0 (no CPU cgroup) to 10000, "
                f"found {self.cpu_weight!r}"
            )
        if isinstance(self.host_uid, int) and self.uid_range_end > 2**32 - 2:
            raise SandboxError(
                f"SandboxPolicy: host_uid + uid_count * (uid_slots + 1) + uid_slots (the last "
                f"sandbox's id block's end) must stay below 2**32 - 1, found {self.uid_range_end} "
                f"for {self.host_uid}, {self.uid_count}, {self.uid_slots}; lower them"
            )
        if self.command_timeout_s <= 0:
            raise SandboxError(f"SandboxPolicy.command_timeout_s: expected > 0, found {self.command_timeout_s}")
        if self.host_uid <= 0:
            raise SandboxError(
                f"SandboxPolicy.host_uid: expected an unprivileged host uid (> 0), found {self.host_uid}; "
                "the sandbox's root must never be host root"
            )
        self.ro_binds = tuple(str(p) for p in self.ro_binds)
        self.system_paths = tuple(self.system_paths)
        self.etc_files = tuple(self.etc_files)
        for path in self.ro_binds + self.system_paths:
            if not os.path.isabs(path) or ".." in path.split("/"):
                raise SandboxError(f"SandboxPolicy: bind paths must be absolute without '..', found {path!r}")
        for name in self.etc_files:
            if name.startswith("/") or not name or ".." in name.split("/"):
                raise SandboxError(f"SandboxPolicy.etc_files: expected relative paths inside /etc, found {name!r}")
        self.env = {str(k): str(v) for k, v in self.env.items()}
        for name, value in self.env.items():  # they reach the shell as C strings "NAME=VALUE"
            if not name or "=" in name or "\0" in name + value:
                raise SandboxError(
                    f"SandboxPolicy.env: expected names without '=' and no NUL bytes, found "
                    f"{name!r}={value!r}; remove or rename that variable"
                )
        if not str(self.workdir).startswith("/"):
            raise SandboxError(f"SandboxPolicy.workdir: expected an absolute path, found {self.workdir!r}")

    @property
    def uid_range_end(self) -> int:
        """One past the last host id the policy's sandboxes may use (the last slot's block, uidslots.py)."""
        return self.host_uid + self.uid_count * (self.uid_slots + 1) + self.uid_slots

    @property
    def cgroup_memory_mb(self) -> int:
        """The memory cgroup's limit: ``memory_mb`` for processes plus every tmpfs the sandbox may fill (the
        writable layer, /tmp and /dev/shm), whose pages the kernel charges to the cgroup of who writes them."""
        return self.memory_mb + self.upper_size_mb + 2 * self.tmp_size_mb

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("ro_binds", "system_paths", "etc_files"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SandboxPolicy:
        return strict_from_dict(cls, data, error=SandboxError)

    def resolved_work_root(self) -> str:
        return self.work_root or os.environ.get("SWEBOX_WORK_ROOT") or f"/tmp/swebox-{os.getuid()}"
