"""``swebox doctor``: is this machine ready for swebox? A host check in seconds, one line per check.

Each check prints ``ok``, ``warn`` (swebox works, slower or with less isolation) or ``FAIL`` (a sandbox, a
layer or a training run cannot work here), what it found and, when not ok, the fix. The exit status is 1 when a
check failed, else 0, so scripts and CI can gate on it. The checks, in the order a rollout needs them:

- user namespaces (the kernel's switches; probe.check_user_namespaces), then a real sandbox started over an
  empty layer running ``echo`` (compiles the session program on first use: the C compiler is checked by it);
- the copy-on-write backend (kernel overlayfs, else fuse-overlayfs, else the slow per-reset extract);
- cgroups (memory and process limits per sandbox; without them rlimits bound each process);
- squashfs tools (mksquashfs packs layers; squashfuse mounts them rootless; without them tar.gz is used);
- git (grading takes the agent's diff with it) and Python interpreters: ones other users can reach (env
  layers' venvs point at one) or prefix installs they cannot (pyenv's under root's home), which env builds
  import as interpreter layers (``swebox cache python import``);
- the Ray loopback variable (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: a ``ray start`` on 127.0.0.1 without it
  advertises the network address; the trainer sets it for itself, hand-started nodes need it);
- free disk where runs and layers go.

It replaces ``swebox bench sandbox --reps 3`` as the README's host check (that benchmark builds a 1.7 GB layer
cache and takes minutes).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Check:
    """One check's result."""

    name: str
    """What was checked, e.g. 'user namespaces'."""
    status: str
    """ok | warn | FAIL."""
    found: str
    """What the check found."""
    fix: str = ""
    """How to fix it ('' when ok)."""

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.status:<5} {self.name}: {self.found}{fix}"


def user_namespaces() -> Check:
    from swebox.envs.sandbox.policy import SandboxError
    from swebox.envs.sandbox.probe import check_user_namespaces

    rootless = os.geteuid() != 0
    try:
        check_user_namespaces(rootless)
    except SandboxError as exc:
        found, _, fix = str(exc).partition("; ")
        return Check("user namespaces", "FAIL", found, fix)
    return Check("user namespaces", "ok", "enabled" + (" (rootless)" if rootless else " (root)"))


def sandbox_start() -> Check:
    from swebox.envs.sandbox import Sandbox

    with tempfile.TemporaryDirectory(prefix="swebox-doctor-") as layer:
        os.mkdir(os.path.join(layer, "testbed"))
        try:
            with Sandbox(layers=[layer]) as sb:
                result = sb.exec("echo swebox-doctor", timeout=60)
                backend = sb.backend
        except Exception as exc:  # whatever stops a sandbox here is this check's finding
            text = " ".join(str(exc).split())[:400]
            return Check(
                "sandbox",
                "FAIL",
                f"a sandbox did not start ({type(exc).__name__}: {text})",
                "see docs/sandbox.md, 'What each backend needs'; `swebox --debug doctor` shows the traceback",
            )
    if result.exit_code != 0 or "swebox-doctor" not in result.output:
        return Check(
            "sandbox",
            "FAIL",
            f"`echo` in a sandbox gave exit {result.exit_code}: {result.output[:200]!r}",
            "see docs/sandbox.md",
        )
    return Check("sandbox", "ok", f"started, ran a command and stopped (backend {backend})")


def overlay_backend() -> Check:
    from swebox.envs.sandbox.probe import fuse_overlayfs_available, overlay_available

    if overlay_available():
        return Check("copy-on-write", "ok", "kernel overlayfs (millisecond resets)")
    if fuse_overlayfs_available():
        return Check(
            "copy-on-write", "warn", "no kernel overlayfs; fuse-overlayfs will be used (slower)", "`modprobe overlay`"
        )
    return Check(
        "copy-on-write",
        "warn",
        "neither overlayfs nor fuse-overlayfs: each reset copies the layers (backend extract, slow)",
        "`modprobe overlay`, or `apt-get install fuse-overlayfs fuse3` and `chmod 0666 /dev/fuse`",
    )


def cgroups() -> Check:
    from swebox.envs.sandbox.limits import Limits
    from swebox.envs.sandbox.policy import SandboxPolicy

    limits = Limits.create(SandboxPolicy(), f"swebox-doctor-{os.getpid()}")
    try:
        memory = limits.enforced_by.get("memory", "")
    finally:
        limits.release()
    if memory.startswith("cgroup"):
        return Check("cgroups", "ok", f"memory and processes per sandbox ({memory.split(' (')[0]})")
    return Check(
        "cgroups",
        "warn",
        "no writable cgroup with the memory and pids controllers: rlimits bound each process instead of each sandbox",
        "run as root, or delegate a cgroup v2 subtree to this user (systemd-run --user --scope -p Delegate=yes ...)",
    )


def squashfs_tools() -> Check:
    missing = [tool for tool in ("mksquashfs", "squashfuse") if shutil.which(tool) is None]
    if not missing:
        return Check(
            "squashfs tools", "ok", "mksquashfs and squashfuse on PATH (layers packed and mounted as squashfs)"
        )
    return Check(
        "squashfs tools",
        "warn",
        f"{' and '.join(missing)} not on PATH: layers are packed as tar.gz and unpacked once per node",
        "apt-get install squashfs-tools squashfuse",
    )


def git() -> Check:
    if shutil.which("git") is None:
        return Check(
            "git",
            "FAIL",
            "not on PATH: grading takes the agent's diff with git, the cache checks repositories out with it",
            "apt-get install git",
        )
    return Check("git", "ok", shutil.which("git") or "")


def interpreters() -> Check:
    from swebox.envs.cache.interpreters import discover

    def minors(found) -> list[str]:
        return sorted({i.version.rsplit(".", 1)[0] for i in found}, key=lambda v: tuple(map(int, v.split("."))))

    found = discover()
    reachable = minors([i for i in found if i.reachable])
    # an unreachable prefix install (pyenv's under a 0700 home) becomes an interpreter layer when a build needs it
    layers = [v for v in minors([i for i in found if not i.reachable and i.prefix != "/usr"]) if v not in reachable]
    if not reachable and not layers:
        return Check(
            "python interpreters",
            "FAIL",
            "none that a sandbox's unprivileged user can reach, and no prefix install to import as a layer",
            "install Python under /usr (apt-get install python3), or a prefix install (pyenv, uv) that env builds "
            "import as an interpreter layer (`swebox cache python import PREFIX`)",
        )
    detail = ", ".join(reachable) + (f"; as interpreter layers: {', '.join(layers)}" if layers else "")
    return Check("python interpreters", "ok", detail)


def ray_loopback() -> Check:
    from swebox.trainers.distributed.ray_connect import CLUSTER_ENV  # a constant: importing it does not import Ray

    if importlib.util.find_spec("ray") is None:
        return Check("ray", "ok", "not installed (only `swebox train --ray` needs it: pip install 'swebox[train]')")
    if os.environ.get(CLUSTER_ENV) == "0":
        return Check("ray", "ok", f"installed; {CLUSTER_ENV}=0 (loopback clusters keep 127.0.0.1)")
    return Check(
        "ray",
        "warn",
        f"installed; {CLUSTER_ENV} is not 0: a `ray start --head --node-ip-address "
        "127.0.0.1` started by hand advertises this machine's network address and a driver waits there "
        "(swebox train and scripts/ray_head.sh set it themselves)",
        f"export {CLUSTER_ENV}=0",
    )


def free_disk(folder: str = "runs") -> Check:
    where = Path(folder)
    while not where.exists():
        where = where.parent if where.parent != where else Path(".")
    free = shutil.disk_usage(where).free / 2**30
    if free < 1:
        return Check(
            "disk",
            "FAIL",
            f"{free:.1f} GiB free at {where.resolve()}",
            "free space (layers and runs "
            "need several GiB), or point --out, logging.run_dir and the layer store at a larger disk",
        )
    if free < 5:
        return Check(
            "disk",
            "warn",
            f"{free:.1f} GiB free at {where.resolve()} (the demo's layers and runs take "
            "about 2 GiB; a corpus far more)",
            "free space or use a larger disk",
        )
    return Check("disk", "ok", f"{free:.1f} GiB free at {where.resolve()}")


CHECKS: tuple[Callable[[], Check], ...] = (
    user_namespaces,
    sandbox_start,
    overlay_backend,
    cgroups,
    squashfs_tools,
    git,
    interpreters,
    ray_loopback,
    free_disk,
)


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check this machine for swebox in seconds: namespaces, sandbox, "
        "overlay, cgroups, squashfs tools, git, interpreters, Ray loopback, disk",
    )
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    results = []
    for check in CHECKS:
        if check is sandbox_start and results and results[0].status == "FAIL":
            result = Check("sandbox", "FAIL", "not tried: user namespaces are off", "fix the line above")
        else:
            result = check()
        results.append(result)
        print(result.line(), flush=True)
    failed = [r.name for r in results if r.status == "FAIL"]
    warned = [r.name for r in results if r.status == "warn"]
    print(
        f"{len(results) - len(failed) - len(warned)} ok, {len(warned)} warn, {len(failed)} failed"
        + (f": {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0
