"""Network for a sandbox that needs one (environment builds), without the host's network namespace.

The sandbox always has its own network namespace. With `network="user"` the host runs slirp4netns (a
user-mode TCP/IP stack, Debian's `slirp4netns`) attached to it: the sandbox sees a `tap0` with 10.0.2.100/24,
a default route to 10.0.2.2 and a DNS forwarder at 10.0.2.3; its connections are made by slirp4netns's own
sockets in the host's namespace. The host's abstract and unix sockets, its interfaces, routes and netfilter
state stay out of reach, and so does the host's loopback (10.0.2.2 does not lead to 127.0.0.1) unless the
policy asks for it (`network_host_loopback`, for a package index or proxy on the host's loopback).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import weakref

from .policy import SandboxError, SandboxPolicy

READY_TIMEOUT_S = 20.0
RESOLV_CONF = "nameserver 10.0.2.3\n"
HOST_LOOPBACK = "10.0.2.2"
"""The address at which the sandbox reaches the host's loopback, when `network_host_loopback` allows it."""


class UserNet:
    """One slirp4netns process serving a sandbox's network namespace; it exits when `close()` (or the death of
    this process) closes the exit pipe."""

    def __init__(self, target_pid: int, policy: SandboxPolicy) -> None:
        exe = shutil.which("slirp4netns")
        if exe is None:
            raise SandboxError(
                "SandboxPolicy(network='user') needs slirp4netns (a user-mode network stack), found "
                "none on PATH; install it with `apt-get install slirp4netns` (`make deps`)"
            )
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        self._close_exit_pipe = weakref.finalize(self, os.close, exit_w)  # also when never closed
        args = [
            exe,
            "--configure",
            "--mtu=65520",
            "--enable-sandbox",
            "--enable-seccomp",
            f"--ready-fd={ready_w}",
            f"--exit-fd={exit_r}",
            str(target_pid),
            "tap0",
        ]
        if not policy.network_host_loopback:
            args.insert(1, "--disable-host-loopback")
        try:
            self.proc = subprocess.Popen(
                args,
                pass_fds=(ready_w, exit_r),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        finally:
            os.close(ready_w)
            os.close(exit_r)
        try:
            ready, _, _ = select.select([ready_r], [], [], READY_TIMEOUT_S)
            if not ready or os.read(ready_r, 1) != b"1":
                self.close()
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise SandboxError(
                    f"slirp4netns did not bring the sandbox's network up within {READY_TIMEOUT_S:g} "
                    f"s: {err.strip() or 'no message'}; check that it runs here "
                    "(`slirp4netns --version`), or use network='none'"
                )
        finally:
            os.close(ready_r)

    def close(self) -> None:
        self._close_exit_pipe()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
