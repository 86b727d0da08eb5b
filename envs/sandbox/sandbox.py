"""Sandbox: an isolated, writable view of a stack of read-only layers, with one persistent shell.

The host side of the mechanism. It has the zygote fork nsinit (the process that owns the namespaces and mounts,
csrc/nsinit.c) with the command line nsinit_args.py builds, writes its id maps, hands it id-mapped lower layers,
and talks to the shell session's supervisor through a ShellSession (shell_session.py); it owns the lifecycle
(start, reset, close, and the cleanup of a start that failed half-way) and the host's view of the files.
Thread-safe per instance: SkyRL runs env calls in a thread pool.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import socket
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path

from . import closer, hostfs, hostrun, idmap, nsinit_args, protocol, rootfs, snapcopy, spawner, uidslots, workdirs
from .layers import Layer
from .limits import Limits, pid_namespace, sweep_stale_cgroups
from .policy import SandboxError, SandboxPolicy
from .probe import choose_backend
from .shell_session import STARTUP_TIMEOUT_S, ExecResult, ShellSession, recv_checked
from .usage import Usage, read_usage
from .usage import reset_peak as reset_usage_peak
from .usernet import UserNet

CGROUP_PREFIX = "swebox-"
MAX_READ_BYTES = 256 * 1024 * 1024
MB = 1024 * 1024
_counter = itertools.count()
_swept: set[str] = set()


class Sandbox:
    """An isolated root filesystem made of `layers` (lowest first) plus a writable overlay, and a shell."""

    def __init__(self, layers: Sequence[str | os.PathLike | Layer], policy: SandboxPolicy | None = None) -> None:
        if isinstance(layers, (str, os.PathLike, Layer)):
            raise SandboxError(
                "Sandbox(layers=...): expected a list of layers (lowest first), found a single "
                f"{type(layers).__name__}; wrap it in a list"
            )
        self.layers = [Layer.of(layer) for layer in layers]
        if not self.layers:
            raise SandboxError("Sandbox(layers=[]): expected at least one layer folder")
        self.policy = policy or SandboxPolicy()
        self.backend = ""
        self._lock = threading.RLock()
        self._state = "new"
        self._proc: spawner.Child | None = None
        self._ctl: socket.socket | None = None
        self._shell: ShellSession | None = None  # the current shell session; made with the control socket
        self._dir = ""
        self._dir_lock = -1
        self._limits: Limits | None = None
        self._net: UserNet | None = None
        self._slot: uidslots.UidSlot | None = None
        self._trees: list[idmap.Tree] = []  # every tree nsinit mounts read-only
        self._shared_ids = ""  # why this sandbox maps to the shared layer ids instead of a block of its own
        self.host_uid = 0
        """The host uid (and gid) the sandbox's root is, once started: the first of a block of its own (uidslots.py;
        policy.host_uid where a layer cannot be id-mapped onto it; rootless: the user's)."""
        self.owner_uid = 0
        """The host uid that owns the sandbox's user namespace, once started: one of its own per live sandbox."""
        self._finalizer: weakref.finalize | None = None
        self._rootless = os.geteuid() != 0

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> Sandbox:
        with self._lock:
            if self._state == "closed":
                raise SandboxError("start() on a closed sandbox: create a new Sandbox instead")
            if self._state == "running":
                return self
            for layer in self.layers:
                layer.check()
            self.backend = choose_backend(self.policy.backend, rootless=self._rootless)
            try:
                self._launch()
            except BaseException:
                self._teardown()
                self._state = "closed"
                raise
            self._state = "running"
            return self

    def _launch(self) -> None:
        work_root = self.policy.resolved_work_root()
        os.makedirs(work_root, mode=0o711, exist_ok=True)
        if not self._rootless:
            rootfs.check_searchable(work_root)
        if work_root not in _swept:
            workdirs.sweep_stale(work_root)
            sweep_stale_cgroups(CGROUP_PREFIX)
            _swept.add(work_root)
        name = f"{os.getpid()}-{next(_counter)}-{os.urandom(3).hex()}"
        if self._rootless:
            self.host_uid = self.owner_uid = os.getuid()
        else:
            self._slot = slot = uidslots.acquire(self.policy)
            self.owner_uid = slot.owner_uid
            self.host_uid = slot.block  # unless a layer owned by the layer ids cannot be id-mapped onto it
        self._dir, self._dir_lock = workdirs.locked_folder(work_root, name)
        os.mkdir(os.path.join(self._dir, "mnt"))
        self._upper_size_mb, self._upper_inodes = self.policy.upper_size_mb, self.policy.upper_inodes
        if self.backend == "extract":  # its writable tmpfs holds a copy of every layer too (memory-charged)
            usage = [workdirs.tree_usage(str(layer.path)) for layer in self.layers]
            self._upper_size_mb += -(-sum(size for size, _ in usage) // MB)
            self._upper_inodes += sum(entries for _, entries in usage)
        limits_policy = dataclasses.replace(self.policy, upper_size_mb=self._upper_size_mb)
        self._limits = limits = Limits.create(limits_policy, f"{CGROUP_PREFIX}{pid_namespace()}-{name}")
        binds = rootfs.binds(self.policy, self.layers)
        etc_layer = rootfs.etc_layer(self.policy)
        trees = nsinit_args.trees(etc_layer, self.layers, binds)
        # rootless, nothing is id-mapped (nsinit maps itself), and the user may not even stat some binds' folders
        self._trees = [] if self._rootless else idmap.classify(trees, self.policy)
        for layer in self.layers:
            layer.acquire()
        host_end, init_end = socket.socketpair()
        self._ctl = host_end
        # archives are opened here: the sandbox's unprivileged uid may not be able to reach their folder
        archive_fds = [
            os.open(layer.archive, os.O_RDONLY) if layer.archive and self.backend == "extract" else -1
            for layer in self.layers
        ]
        argv = nsinit_args.build(
            policy=self.policy,
            backend=self.backend,
            staging=os.path.join(self._dir, "mnt"),
            layers=self.layers,
            archives=[fd >= 0 for fd in archive_fds],
            binds=binds,
            etc_layer=etc_layer,
            tree_owners=self._trees,
            rootless=self._rootless,
            owner_uid=self.owner_uid,
            upper_size_mb=self._upper_size_mb,
            upper_inodes=self._upper_inodes,
            cgroups=limits.cgroup_dirs,
            rlimits=limits.rlimits(),
        )
        try:
            # nsinit is in its cgroups before it makes any process, and starts at once
            self._proc = proc = spawner.spawn(argv, [init_end.fileno(), *(fd for fd in archive_fds if fd >= 0)])
        finally:
            init_end.close()
            for fd in archive_fds:
                if fd >= 0:
                    os.close(fd)
        self._finalizer = weakref.finalize(
            self, _emergency_cleanup, self._proc, self._limits, self._dir, self._dir_lock
        )
        host_end.settimeout(STARTUP_TIMEOUT_S)
        if not self._rootless:  # nsinit's user namespace exists: we write its maps (rootless, it maps itself)
            reply = recv_checked(host_end, "the sandbox did not start")
            if reply.get("op") != "userns_ready":
                raise SandboxError(f"the sandbox did not start: expected its user namespace, found {reply}")
            assert self._slot is not None  # acquired above: a sandbox that is not rootless has a block of ids
            mapped = idmap.map_ids(proc.pid, reply.get("layer_ns_pid", 0), self._trees, self.policy, self._slot.block)
            self.host_uid, self._shared_ids = mapped.host_uid, mapped.shared_why
            fds = mapped.fds
            try:  # one lower per tree, in nsinit_args.trees' order
                protocol.send(host_end, {"op": "lowers"}, fds)
            finally:
                for fd in fds:
                    os.close(fd)
        # nsinit mounts the root and starts the first session without being asked
        self._shell = ShellSession(host_end, limits.enforced_by)  # before take(): its socket closes with ours
        self._shell.take(
            "the sandbox did not start",
            "; see docs/sandbox.md for the host features each backend needs, or try SandboxPolicy(backend='extract')",
        )
        limits.enforced_by["kernel_budgets"] = uidslots.budgets_note(
            self._rootless, self.host_uid, self.owner_uid, self._shared_ids, self.policy.uid_count
        )
        if self.policy.network == "user":  # attached to nsinit's network namespace before the first command
            self._net = UserNet(proc.pid, self.policy)

    def _started(self) -> tuple[spawner.Child, socket.socket, Limits]:
        """nsinit, its control socket and its limits: every started sandbox has them (start() made them)."""
        assert self._proc is not None and self._ctl is not None and self._limits is not None, "not started"
        return self._proc, self._ctl, self._limits

    def _live_shell(self) -> ShellSession:
        """The shell session; a running sandbox always has one (_require_running checked the state)."""
        assert self._shell is not None, "no shell session"
        return self._shell

    def reset(self) -> None:
        """Back to exactly the layers' state: the writable layer is dropped and every process is gone."""
        with self._lock:
            self._require_running("reset")
            self._live_shell().renew({"op": "reset"})

    def close(self, wait: bool = True) -> None:
        """Stop everything and remove every trace; safe to call twice.

        wait=False returns once the sandbox's processes have been told to stop; the rest (waiting for them, the
        cgroups, the working folder, the id slot, the layer references) finishes on a background thread
        (closer.py): `swebox.envs.sandbox.wait_for_closes()` waits for it, as does the interpreter's exit."""
        with self._lock:
            if self._state == "closed":
                return
            self._state = "closed"
            if wait:
                self._teardown()
            else:
                self._hang_up()
                closer.submit(self._teardown)

    def _hang_up(self) -> None:
        """Close both sockets: nsinit and the session take that as the order to stop."""
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        if self._ctl is not None:
            try:
                protocol.send(self._ctl, {"op": "close"})
            except OSError:
                pass
            self._ctl.close()
            self._ctl = None

    def _teardown(self) -> None:
        self._hang_up()
        if self._net is not None:
            self._net.close()
            self._net = None
        if self._finalizer is not None:
            self._finalizer()
        elif self._dir:
            _emergency_cleanup(self._proc, self._limits, self._dir, self._dir_lock)
        if self._limits is not None:
            for layer in self.layers:
                layer.release()
            self._limits = None
        if self._slot is not None:  # nsinit is gone: its processes die with it, the owner uid is free again
            self._slot.release()
            self._slot = None

    def _require_running(self, what: str) -> None:
        if self._state == "closed":
            raise SandboxError(f"{what}() on a closed sandbox: create a new Sandbox instead")
        if self._state != "running":
            self.start()

    # -- commands ---------------------------------------------------------------------------------------
    def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        """Run `command` in the persistent shell (stdin is /dev/null); never raises for what the command does."""
        timeout = float(timeout if timeout is not None else self.policy.command_timeout_s)
        if timeout <= 0:
            raise SandboxError(f"exec(timeout={timeout}): expected a positive number of seconds")
        with self._lock:
            self._require_running("exec")
            return self._live_shell().exec(command, timeout)

    def run(
        self,
        command: str,
        timeout: float = 300.0,
        max_stdout: int = hostrun.DEFAULT_MAX_STDOUT,
        quiesce: bool = False,
        freeze: bool = False,
    ) -> hostrun.RunResult:
        """Run the host's own `command` with /bin/sh in a fresh process of the session, not in the agent's shell
        (hostrun.py): nothing the agent did to its shell or environment changes it. `quiesce` kills every other
        process of the session first, `freeze` stops them while it runs. Raises SandboxError when the session
        itself is gone."""
        if timeout <= 0 or max_stdout <= 0:
            raise SandboxError(f"run(timeout={timeout}, max_stdout={max_stdout}): expected positive numbers")
        with self._lock:
            self._require_running("run")
            return self._live_shell().run(command, timeout, max_stdout, quiesce, freeze)

    # -- files --------------------------------------------------------------------------------------------
    def _root_view(self) -> str:
        """The session's root as the host reaches it: the sandbox's own view, read-only binds included."""
        return f"/proc/{self._live_shell().pid}/root"

    def read_file(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """Read a file as the sandbox sees it; links never lead out of the sandbox."""
        with self._lock:
            self._require_running("read_file")
            return hostfs.read_file(self._root_view(), path, max_bytes)

    def read_tail(self, path: str, max_bytes: int) -> bytes:
        """The last `max_bytes` of a file, read by the host (no process of the sandbox runs for it)."""
        with self._lock:
            self._require_running("read_tail")
            return hostfs.read_tail(self._root_view(), path, max_bytes)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Create or replace a file as the sandbox's root would; its folder must exist. Links never lead out."""
        if isinstance(data, str):
            data = data.encode()
        with self._lock:
            self._require_running("write_file")
            owner = None if self._rootless else (self.host_uid, self.host_uid)
            hostfs.write_file(self._root_view(), path, data, mode, owner)

    def snapshot(self) -> Layer:
        """Freeze the current filesystem changes into a new read-only Layer (processes are not included)."""
        with self._lock:
            self._require_running("snapshot")
            snaps = os.path.join(self.policy.resolved_work_root(), "snapshots")
            os.makedirs(snaps, mode=0o700, exist_ok=True)
            target = os.path.join(snaps, f"{os.getpid()}-{next(_counter)}-{os.urandom(3).hex()}")
            # what the writable layer (a tmpfs of that size and nr_inodes; extract: no delta, the whole private
            # copy is the state) can hold: a snapshot never adds more to the host's disk and inodes
            cap, entries = self._upper_size_mb * MB, self._upper_inodes
            source = f"/proc/{self._started()[0].pid}/root{self._live_shell().upper}"
            base, count = (os.getuid(), 1) if self._rootless else (self.host_uid, self.policy.uid_count)
            try:
                snapcopy.copy_tree(source, target, base, count, cap, entries)
            except BaseException:
                import shutil

                shutil.rmtree(target, ignore_errors=True)
                raise
            # the interpreters come from my layers' makers, never from what my tree now says (a pyvenv.cfg)
            interpreters = tuple(dict.fromkeys(p for layer in self.layers for p in layer.interpreters or ()))
            return Layer(
                Path(target), name=f"snapshot-of-{self.layers[-1].name}", ephemeral=True, interpreters=interpreters
            )

    def fork(self) -> Sandbox:
        """A new, started Sandbox whose layers are mine plus a snapshot of my current state."""
        snap = self.snapshot()
        layers = [snap] if self.backend == "extract" else [*self.layers, snap]
        try:
            return Sandbox(layers, self.policy).start()
        finally:
            snap.discard_if_unused()  # the child failed to start: nobody will release it

    def limits_in_force(self) -> dict[str, str]:
        """Which mechanism enforces each limit of the policy on this host (cgroup, rlimit, tmpfs, timeout), and
        under "syscalls" the seccomp filter in force, or "none: <why>"."""
        with self._lock:
            self._require_running("limits_in_force")
            return dict(self._started()[2].enforced_by)

    def usage(self, reset_peak: bool = False) -> Usage:
        """CPU seconds, peak memory and writable-layer bytes used since the sandbox started (usage.py);
        ``reset_peak``: then start the memory peak afresh where the host allows it (an episode's reset)."""
        with self._lock:
            self._require_running("usage")
            proc, _, limits = self._started()
            shell = self._live_shell()
            upper = f"/proc/{proc.pid}/root{shell.upper}" if shell.upper else ""
            found = read_usage(list(limits.cgroup_dirs), proc.pid, upper)
            if reset_peak:
                reset_usage_peak(list(limits.cgroup_dirs))
            return found

    @property
    def pid(self) -> int:
        """Host pid of nsinit, the process that holds the sandbox's namespaces."""
        return self._proc.pid if self._proc else 0


def _emergency_cleanup(proc: spawner.Child | None, limits: Limits | None, folder: str, lock_fd: int) -> None:
    if proc is not None:
        if not proc.exited(2.0):
            proc.kill()
            proc.exited(None)
        proc.release()
    if limits is not None:
        limits.release()
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    if lock_fd >= 0:  # released last: until the folder is gone, no sweeper may take it for stale
        os.close(lock_fd)
