"""nsinit: the long-lived process that owns one sandbox's namespaces and its filesystem; its first, Python half.

Forked by the zygote (zygote.py) for each sandbox and handed its control socket, it creates the user
namespace (the host writes the id maps and sends the id-mapped lowers, or nsinit maps itself when rootless),
then mount, network, IPC and UTS namespaces, and mounts the parts every session shares in a staging tmpfs: the
layers, read-only, the /etc layer, the binds' sources, a skeleton of mount points, a /dev. Then it execs its C
half (csrc/init.c) in the same process, which mounts each session's root (the layers under a writable tmpfs,
with overlayfs), starts the sessions (csrc/session.c), serves the host's session, reset and close requests,
and, when the host goes away (EOF), kills everything and exits; the namespaces and mounts vanish with it.
Python until the exec because the id-map exchange with the host and the mount API are simplest here; C after
it so that an idle sandbox holds no interpreter.

Standard library only: the zygote imports it as a plain module next to syscalls.py, protocol.py, children.py,
seccomp.py and extract.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import socket
import struct
import sys

import extract
import protocol
import seccomp
import syscalls as S

RO_FLAGS = {1: S.MS_RDONLY, 2: S.MS_NOSUID, 4: S.MS_NODEV, 8: S.MS_NOEXEC, 1024: S.MS_NOATIME,
            2048: S.MS_NODIRATIME, 4096: S.MS_RELATIME}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def bind_readonly(src: str, dst: str) -> None:
    """Bind `src` on `dst` read-only, keeping the flags the kernel locks on binds made in a user namespace."""
    S.mount(src, dst, None, S.MS_BIND | S.MS_REC)
    flags = os.statvfs(dst).f_flag
    locked = sum(bit for st, bit in RO_FLAGS.items() if flags & st and bit != S.MS_RDONLY)
    S.mount(None, dst, None, S.MS_BIND | S.MS_REMOUNT | S.MS_RDONLY | locked)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        iff_up, iff_loopback, iff_running = 0x1, 0x8, 0x40
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", iff_up | iff_loopback | iff_running))


def helper_python() -> str:
    """An interpreter we may run as the sandbox's uid: ours may sit in a folder only host root can enter (a pyenv
    build under /root), the system's is where Debian puts it."""
    for path in (sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3"):
        if path and os.access(path, os.X_OK):
            return path
    raise RuntimeError(f"the extract backend copies the layers with a Python the sandbox's uid can run, and may run "
                       f"neither {sys.executable} nor /usr/bin/python3: install python3 or use the overlay backend")


class Init:
    def __init__(self, ctl: socket.socket, cfg: dict, cgroups_fd: int = -1) -> None:
        self.ctl = ctl
        self.cfg = cfg
        self.cgroups_fd = cgroups_fd  # the zygote's word that we are in the sandbox's cgroups (zygote.spawn)
        self.st = cfg["staging"]
        self.layer_ns = (0, -1)  # pid of the helper whose user namespace id-maps layers, our end of its pipe

    # -- namespaces and the static part of the filesystem ------------------------------------------------
    def enter_namespaces(self) -> None:
        if not self.cfg["map_self"]:
            # the user namespace is created by (owned by) the sandbox's own host uid, not host root: the kernel
            # charges per-user budgets (inotify, user namespaces) of the namespace's processes to its owner too, so
            # they are this sandbox's alone (uidslots.py). The host, as root, still writes our id maps.
            owner = self.cfg["owner"]
            os.setgroups([])
            os.setresgid(owner, owner, owner)
            os.setresuid(owner, owner, owner)
            if self.cfg["layer_idmap"]:
                self.fork_layer_namespace()
        S.unshare(S.CLONE_NEWUSER)
        if self.cfg["map_self"]:
            uid, gid = self.cfg["outer_uid"], self.cfg["outer_gid"]
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
            self.lower_fds: list[int] = []
            self.prepared = {"layers": [], "binds": []}
        else:
            # the host writes our maps and sends the lowers, cloned, read-only and id-mapped
            protocol.send(self.ctl, {"op": "userns_ready", "layer_ns_pid": self.layer_ns[0]})
            self.prepared, self.lower_fds = protocol.recv(self.ctl)
            if self.layer_ns[0]:  # the id-mapped mounts keep their mapping: the namespace is no longer needed
                os.close(self.layer_ns[1])
                os.waitpid(self.layer_ns[0], 0)
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        # always a network namespace of our own: with network="user" the host attaches slirp4netns to it
        S.unshare(S.CLONE_NEWNS | S.CLONE_NEWIPC | S.CLONE_NEWUTS | S.CLONE_NEWNET)
        S.mount(None, "/", None, S.MS_REC | S.MS_PRIVATE)
        socket.sethostname(self.cfg["hostname"])
        loopback_up()
        S.prctl(S.PR_SET_CHILD_SUBREAPER, 1)

    def wait_for_cgroups(self) -> None:
        """Before our first process: every process of the sandbox must be in its cgroups (limits.py)."""
        if self.cgroups_fd < 0:
            return
        word = os.read(self.cgroups_fd, 1024)
        os.close(self.cgroups_fd)
        self.cgroups_fd = -1
        if word != b"1":
            raise RuntimeError(f"could not move nsinit into its cgroups: {word[1:].decode() or 'the zygote died'}")

    def fork_layer_namespace(self) -> None:
        """A child in a user namespace of its own, for the host to map the layer ids onto our id block with and
        id-map the layers owned by them (uidslots.py). It lives until we close our end of its pipe (or die)."""
        self.wait_for_cgroups()
        hold_r, hold_w = os.pipe()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(hold_w)
                os.close(ready_r)
                S.unshare(S.CLONE_NEWUSER)
                os.write(ready_w, b"1")
                os.read(hold_r, 1)
            finally:
                os._exit(0)
        os.close(hold_r)
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as f:
            if not f.read(1):
                raise RuntimeError("could not create the user namespace that id-maps the layers")
        self.layer_ns = (pid, hold_w)

    def build_static(self) -> None:
        S.mount("tmpfs", self.st, "tmpfs", S.MS_NOSUID | S.MS_NODEV, "size=64m,mode=0755")
        for name in ("skel", "rw0", "root0", "rw1", "root1", "dev"):
            os.mkdir(os.path.join(self.st, name))
        fds = iter(self.lower_fds)

        def attach(kind: str, index: int, source: str, target: str) -> str:
            os.mkdir(target)
            if index in self.prepared.get(kind, ()):  # cloned, read-only (and id-mapped) by the host
                S.move_mount(next(fds), target)
            else:
                bind_readonly(source, target)
            return target

        self.etc = attach("etc", 0, self.cfg["etc_layer"], os.path.join(self.st, "E"))  # built by the host
        self.lowers = [attach("layers", i, layer["path"], os.path.join(self.st, f"L{i}"))
                       for i, layer in enumerate(self.cfg["layers"])]
        self.bind_sources = {i: attach("binds", i, bind["src"], os.path.join(self.st, f"B{i}"))
                             for i, bind in enumerate(self.cfg["binds"]) if bind["kind"] == "dir"}
        for fd in self.lower_fds:
            os.close(fd)
        self.build_skeleton(os.path.join(self.st, "skel"))
        self.build_dev(os.path.join(self.st, "dev"))
        self.session_args = self.session_arguments()

    def build_skeleton(self, skel: str) -> None:
        """The lowest layer: mount points for binds (the minimal /etc is the host's etc layer, just above)."""
        for name in ("proc", "dev", "tmp", "root", "etc", "sys", "run", "var/tmp", "home"):
            os.makedirs(os.path.join(skel, name), exist_ok=True)
        os.chmod(os.path.join(skel, "tmp"), 0o1777)
        os.chmod(os.path.join(skel, "var/tmp"), 0o1777)
        os.chmod(os.path.join(skel, "root"), 0o700)
        for bind in self.cfg["binds"]:
            path = os.path.join(skel, bind["dst"].lstrip("/"))
            if bind["kind"] == "symlink":
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.symlink(bind["target"], path)
            else:
                os.makedirs(path, exist_ok=True)

    def build_dev(self, dev: str) -> None:
        S.mount("tmpfs", dev, "tmpfs", S.MS_NOSUID | S.MS_NOEXEC, "size=1m,mode=0755")
        for name in DEVICES:
            path = os.path.join(dev, name)
            open(path, "w").close()
            S.mount(f"/dev/{name}", path, None, S.MS_BIND)
        for name in ("pts", "shm"):
            os.mkdir(os.path.join(dev, name))
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
            os.symlink(target, os.path.join(dev, name))

    # -- handing over to the C half ------------------------------------------------------------------------
    def session_arguments(self) -> list[str]:
        """The session program's options that are the same for every session of this sandbox."""
        cfg = self.cfg
        program, note = seccomp.filter_for(cfg["seccomp"]["enabled"], cfg["seccomp"]["allow_ptrace"])
        args = ["--dev", os.path.join(self.st, "dev"), "--tmp-size-mb", str(cfg["tmp_size_mb"]),
                "--max-output", str(int(cfg["max_output_bytes"])), "--dumpable", str(int(cfg["map_self"])),
                "--workdir", str(cfg.get("workdir", "/")), "--seccomp-note", note, "--seccomp-filter", program.hex()]
        for i, bind in enumerate(cfg["binds"]):
            if bind["kind"] == "dir":
                args += ["--bind-from", self.bind_sources[i], "--bind-to", bind["dst"]]
        for name, value in cfg["rlimits"].items():
            args += ["--rlimit", f"{getattr(resource, name)}={value}"]
        return args

    def init_arguments(self) -> list[str]:
        """csrc/init.c's command line: how to mount a slot's root and start a session on it."""
        cfg, st = self.cfg, self.st
        # relative paths (from the staging folder) keep host paths out of the sandbox's /proc/self/mountinfo
        lowerdir = ":".join(reversed(["skel", "E", *(os.path.basename(p) for p in self.lowers)]))
        args = [cfg["session_program"], "init", "--ctl", str(self.ctl.fileno()), "--staging", st,
                "--backend", cfg["backend"], "--upper-size-mb", str(cfg["upper_size_mb"]), "--lowerdir", lowerdir,
                "--warm-reset", str(int(cfg["warm_reset"])), "--dumpable", str(int(cfg["map_self"]))]
        for name, value in cfg["env"].items():
            args += ["--env", f"{name}={value}"]
        if cfg["backend"] == "extract":  # the copy is extract.py's, run as a helper with the target appended
            spec = {"bases": [os.path.join(st, "skel"), self.etc], "layers": cfg["layers"], "lowers": self.lowers}
            for arg in (helper_python(), "-I", "-S", extract.__file__, json.dumps(spec)):
                args += ["--extract", arg]
        return [*args, "--", *self.session_args]

    def exec_init(self) -> None:
        """Become csrc/init.c, which serves the sandbox from here on (never returns). The control socket and the
        archives (extract's helper reads them) stay open across the exec; nothing else of ours is open."""
        self.wait_for_cgroups()  # processes start from here on: sessions, fuse-overlayfs, extract's cp and tar
        os.set_inheritable(self.ctl.fileno(), True)
        for layer in self.cfg["layers"]:
            if layer["archive_fd"] >= 0:
                os.set_inheritable(layer["archive_fd"], True)
        os.execv(self.cfg["session_program"], self.init_arguments())


def join_own_cgroups(dirs: list[str]) -> None:
    """Move this process into the cgroup v1 folders `dirs` by writing "0" to their `tasks`: that moves only the
    calling thread, which the kernel does without its global threadgroup lock, so it never waits for an RCU grace
    period (0.5 ms for three controllers, against 6-16 ms through cgroup.procs after an idle moment). A fresh fork
    has one thread, so the thread is the whole process. Before anything else: we are still host root, and nothing
    of the sandbox runs yet."""
    for path in dirs:
        with open(os.path.join(path, "tasks"), "w") as f:
            f.write("0")


def run(fds: list[int], cfg: dict, cgroups_fd: int, own_cgroups: list[str]) -> None:
    """Prepare one sandbox, then become its C half (csrc/init.c); never returns. Called in a fresh fork of the
    zygote (zygote.py) with the host's request: `cfg`, and `fds`: the control socket, then the archives that
    cfg's layers point at; we join the cgroup v1 folders `own_cgroups` ourselves, and `cgroups_fd` says when
    the zygote has put us in the others."""
    ctl = socket.socket(fileno=fds[0])
    for layer in cfg["layers"]:
        layer["archive_fd"] = fds[layer["archive"]] if layer["archive"] >= 0 else -1
    init = Init(ctl, cfg, cgroups_fd)
    try:
        join_own_cgroups(own_cgroups)
        init.enter_namespaces()
        init.build_static()
        init.exec_init()
    except Exception as exc:
        protocol.send(ctl, {"error": f"{type(exc).__name__}: {exc}"})
    os._exit(1)
