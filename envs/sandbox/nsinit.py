"""nsinit: the long-lived process that owns one sandbox's namespaces and its filesystem.

Forked by the zygote (zygote.py) for each sandbox and handed its control socket, it creates the user
namespace (the host writes the id maps, or nsinit maps itself when rootless), then mount, network, IPC and UTS
namespaces, stacks the layers under a writable tmpfs with overlayfs, and serves requests on the socket:

- session: start a shell session (csrc/session.c): a new PID, mount and IPC namespace whose pid 1 sees the
  overlay as `/` after pivot_root, with read-only system binds, fresh /proc, private /tmp, /dev/shm, /dev;
- reset: kill the session (its PID namespace dies with its pid 1), drop the writable layer, mount a fresh
  one and start a new session. The cost does not depend on the size of the layers. With ``warm_reset``
  (overlay backend), the session after the next is prepared SPARE_DELAY_S after a reset has answered: a fresh
  writable layer in the other of two slots and a started shell, waiting. A later reset then kills the old
  session, hands the prepared one over, and tears the old slot down after answering.

When the host goes away (EOF), nsinit kills everything and exits; its namespaces and mounts vanish with it.
Standard library only: the zygote imports it as a plain module next to syscalls.py, protocol.py, children.py,
seccomp.py and extract.py.
"""

from __future__ import annotations

import fcntl
import os
import resource
import select
import signal
import socket
import struct
import time

import children
import extract
import protocol
import seccomp
import syscalls as S

RO_FLAGS = {1: S.MS_RDONLY, 2: S.MS_NOSUID, 4: S.MS_NODEV, 8: S.MS_NOEXEC, 1024: S.MS_NOATIME,
            2048: S.MS_NODIRATIME, 4096: S.MS_RELATIME}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
# The next session is prepared this long after a reset: right after one, the agent's first command runs, and
# preparing (~10 ms of CPU) beside it would slow both on a small machine
SPARE_DELAY_S = 0.02


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


class Init:
    def __init__(self, ctl: socket.socket, cfg: dict, cgroups_fd: int = -1) -> None:
        self.ctl = ctl
        self.cfg = cfg
        self.cgroups_fd = cgroups_fd  # the zygote's word that we are in the sandbox's cgroups (zygote.spawn)
        self.st = cfg["staging"]
        self.slot = 0  # the writable layer and root of the live session: rw<slot>, root<slot>
        self.session_pid = 0
        self.spare: dict | None = None  # a prepared session (warm_reset): its slot, pids, upper, host end
        self.spare_due: float | None = None  # when to prepare the next one (time.monotonic())
        self.fuse = None  # the fuse-overlayfs daemon (subprocess.Popen), fuse backend only
        self.layer_ns = (0, -1)  # pid of the helper whose user namespace id-maps layers, our end of its pipe
        self.wake = -1  # readable on SIGCHLD, once serving (children.child_events)

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

    # -- the writable layer ------------------------------------------------------------------------------
    def slot_root(self, slot: int) -> str:
        return os.path.join(self.st, f"root{slot}")

    def mount_root(self, slot: int) -> None:
        self.wait_for_cgroups()  # processes start from here on: fuse-overlayfs, extract's cp and tar, sessions
        backend = self.cfg["backend"]
        if backend == "extract":
            self.extract_root(self.slot_root(slot))
            return
        rw = f"rw{slot}"
        S.mount("tmpfs", os.path.join(self.st, rw), "tmpfs", S.MS_NOSUID | S.MS_NODEV,
                f"size={self.cfg['upper_size_mb']}m,mode=0755")
        os.mkdir(os.path.join(self.st, rw, "upper"))
        os.mkdir(os.path.join(self.st, rw, "work"))
        # relative paths (from the staging folder) keep host paths out of the sandbox's /proc/self/mountinfo
        lowerdir = ":".join(reversed(["skel", "E", *(os.path.basename(p) for p in self.lowers)]))
        options = f"lowerdir={lowerdir},upperdir={rw}/upper,workdir={rw}/work"
        os.chdir(self.st)
        if backend == "overlay":
            S.mount("overlay", f"root{slot}", "overlay", 0, options + ",userxattr")
        else:
            self.mount_fuse(options, f"root{slot}")

    def mount_fuse(self, options: str, target: str) -> None:
        import subprocess

        self.fuse = subprocess.Popen(["fuse-overlayfs", "-f", "-o", options + ",squash_to_root", target],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(5000):  # mounted once the daemon serves it
            if os.path.ismount(os.path.join(self.st, target)):
                return
            if self.fuse.poll() is not None:
                raise RuntimeError(f"fuse-overlayfs failed: {self.fuse.stderr.read().decode()[-2000:]}")
            time.sleep(0.001)
        raise RuntimeError("fuse-overlayfs did not mount within 5 s")

    def extract_root(self, target: str) -> None:
        """The paper-style restore (extract.py) into a fresh tmpfs of its own, sized by the host (the layers plus
        `upper_size_mb`) and mounted as the root: a reset unmounts it, which frees the old copy at once."""
        S.mount("tmpfs", target, "tmpfs", S.MS_NOSUID | S.MS_NODEV, f"size={self.cfg['upper_size_mb']}m,mode=0755")
        extract.copy_layers([os.path.join(self.st, "skel"), self.etc], self.cfg["layers"], self.lowers, target)

    def unmount_root(self, slot: int) -> None:
        S.umount(self.slot_root(slot))
        if self.fuse is not None:
            self.fuse.kill()
            self.fuse.wait()
            self.fuse = None
        if self.cfg["backend"] != "extract":
            S.umount(os.path.join(self.st, f"rw{slot}"))

    # -- sessions ----------------------------------------------------------------------------------------
    def prepare_session(self, slot: int) -> dict:
        """Start a session on slot's root (csrc/session.c); its shell starts and waits. Returns what hand_over()
        sends the host.

        The session program begins as a short-lived starter: it unshares the PID namespace, forks the session's
        pid 1 and exits. We, the subreaper, inherit pid 1 and wait for that exit, so from here on pid 1 is our
        own child, to kill and reap; only then may pid 1 ask for a signal at our death (session.c says why)."""
        host_end, session_end = socket.socketpair()
        pid_r, pid_w = os.pipe()
        try:
            # handed over at their own numbers: no dup2 shuffle that could overwrite one with the other
            for fd in (session_end.fileno(), pid_w):
                os.set_inheritable(fd, True)
            argv = [*self.session_args, "--root", self.slot_root(slot), "--socket", str(session_end.fileno()),
                    "--pid-pipe", str(pid_w)]
            starter = self.spawn_retrying(argv)
        except BaseException:
            host_end.close()
            os.close(pid_r)
            raise
        finally:
            session_end.close()
            os.close(pid_w)
        with os.fdopen(pid_r, "rb") as f:
            pid = int(f.read() or 0)  # pid 1's host pid: the host reaches its files via /proc/PID/root
        os.waitpid(starter, 0)
        if not pid:  # the starter failed before pid 1 existed, and said why on the session's socket
            with host_end:
                host_end.settimeout(1)
                try:
                    reply, _ = protocol.recv(host_end)
                except (protocol.ProtocolError, OSError):
                    reply = {}
            raise RuntimeError(reply.get("error", "the session program exited without starting a session"))
        host_end.sendall(b"\0")  # pid 1 is ours now: it may ask for a signal at our death
        # the host copies the writable part from here for a snapshot (extract: the whole private copy)
        upper = os.path.join(self.st, f"rw{slot}", "upper")
        if self.cfg["backend"] == "extract":
            upper = self.slot_root(slot)
        return {"slot": slot, "session_pid": pid, "upper": upper, "host_end": host_end}

    def session_arguments(self) -> list[str]:
        """The session program's options that are the same for every session of this sandbox."""
        cfg = self.cfg
        program, note = seccomp.filter_for(cfg["seccomp"]["enabled"], cfg["seccomp"]["allow_ptrace"])
        args = ["swebox-session", "--dev", os.path.join(self.st, "dev"), "--tmp-size-mb", str(cfg["tmp_size_mb"]),
                "--max-output", str(int(cfg["max_output_bytes"])), "--dumpable", str(int(cfg["map_self"])),
                "--workdir", str(cfg.get("workdir", "/")), "--seccomp-note", note, "--seccomp-filter", program.hex()]
        for i, bind in enumerate(cfg["binds"]):
            if bind["kind"] == "dir":
                args += ["--bind-from", self.bind_sources[i], "--bind-to", bind["dst"]]
        for name, value in cfg["rlimits"].items():
            args += ["--rlimit", f"{getattr(resource, name)}={value}"]
        return args

    def hand_over(self, session: dict) -> None:
        """Make `session` the live one and send the host its socket."""
        self.slot, self.session_pid = session["slot"], session["session_pid"]
        protocol.send(self.ctl, {"op": "session", "pid": session["session_pid"], "upper": session["upper"]},
                      [session["host_end"].fileno()])
        session["host_end"].close()

    def reset(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None and not self.alive(spare["session_pid"]):
            self.discard(spare)  # its supervisor died waiting (the OOM killer): start afresh below
            spare = None
        if spare is None:
            # extract: the old copy's memory is freed once no session's mount namespace holds it
            self.stop_session(wait=self.cfg["backend"] == "extract")
            self.unmount_root(self.slot)
            self.mount_root(self.slot)
            self.hand_over(self.prepare_session(self.slot))
        else:
            old = self.slot
            self.stop_session(wait=False)
            self.hand_over(spare)
            self.unmount_root(old)  # after answering: off the host's critical path
        if self.cfg["warm_reset"]:
            self.spare_due = time.monotonic() + SPARE_DELAY_S

    def prepare_spare(self) -> None:
        """The session after the next, on the other slot; a failure here is only a slower next reset."""
        other = 1 - self.slot
        try:
            self.mount_root(other)
        except Exception:
            return
        try:
            self.spare = self.prepare_session(other)
        except Exception:
            self.unmount_root(other)

    def discard(self, session: dict) -> None:
        session["host_end"].close()
        try:
            os.kill(session["session_pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.unmount_root(session["slot"])

    def alive(self, pid: int) -> bool:
        try:
            return os.waitpid(pid, os.WNOHANG)[0] == 0
        except ChildProcessError:  # reaped already
            return False

    def spawn_retrying(self, argv: list[str]) -> int:
        """Start the session program, waiting while the process limit is still full of a killed session's dying
        processes. posix_spawn: no copy of this interpreter's page tables, as a fork would make."""
        for _ in range(1000):
            try:
                return os.posix_spawn(self.cfg["session_program"], argv, self.cfg["env"])
            except BlockingIOError:
                self.reap(block=False)
                time.sleep(0.01)
        return os.posix_spawn(self.cfg["session_program"], argv, self.cfg["env"])

    def stop_session(self, wait: bool) -> None:
        if self.session_pid:
            try:
                os.kill(self.session_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.session_pid = 0
        self.reap(block=wait)

    def reap(self, block: bool) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    # -- the request loop --------------------------------------------------------------------------------
    def serve(self) -> None:
        self.wake = children.child_events()
        # poll, not select: the control socket keeps the number it had in the host process, which may be past
        # select's limit of 1024 when the host holds hundreds of sandboxes
        poller = select.poll()
        poller.register(self.ctl, select.POLLIN)
        poller.register(self.wake, select.POLLIN)
        while True:
            # idle, this blocks: it wakes for a request or a SIGCHLD (the pid 1 of a killed session, or any
            # process reparented to us, the subreaper, died), or when the next session is due to be prepared
            wait_ms = None if self.spare_due is None else max(0, int((self.spare_due - time.monotonic()) * 1000))
            ready = {fd for fd, _ in poller.poll(wait_ms)}
            if self.spare_due is not None and time.monotonic() >= self.spare_due:
                self.spare_due = None
                self.prepare_spare()
            if self.wake in ready:
                children.drain(self.wake)
                self.reap(block=False)
            if self.ctl.fileno() not in ready:
                continue
            try:
                request, _ = protocol.recv(self.ctl)
            except (protocol.ProtocolError, OSError):
                return
            op = request.get("op")
            try:
                if op == "session":
                    self.hand_over(self.prepare_session(self.slot))
                elif op == "reset":
                    self.reset()
                elif op == "close":
                    return
                else:
                    protocol.send(self.ctl, {"error": f"unknown request {op!r}"})
            except Exception as exc:
                protocol.send(self.ctl, {"error": f"{op} failed: {type(exc).__name__}: {exc}"})


def run(fds: list[int], cfg: dict, cgroups_fd: int) -> None:
    """Serve one sandbox, then exit; never returns. Called in a fresh fork of the zygote (zygote.py) with the
    host's request: `cfg`, and `fds`: the control socket, then the archives that cfg's layers point at;
    `cgroups_fd` says when we are in the sandbox's cgroups."""
    ctl = socket.socket(fileno=fds[0])
    for layer in cfg["layers"]:
        layer["archive_fd"] = fds[layer["archive"]] if layer["archive"] >= 0 else -1
    init = Init(ctl, cfg, cgroups_fd)
    try:
        init.enter_namespaces()
        init.build_static()
        init.mount_root(init.slot)
        session = init.prepare_session(init.slot)
    except Exception as exc:
        protocol.send(ctl, {"error": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    init.hand_over(session)  # the first session needs no request: the host waits for it
    try:
        init.serve()
    finally:
        if init.spare is not None:
            try:
                init.discard(init.spare)
            except OSError:
                pass  # its processes die with us all the same (parent-death signal)
        init.stop_session(wait=True)
    os._exit(0)  # nothing to flush or finalise: the host waits for this exit, interpreter teardown would add to it
