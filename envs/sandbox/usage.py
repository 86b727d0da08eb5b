"""What a sandbox has used so far: CPU seconds, peak memory, bytes in its writable layer.

Read from the sandbox's own cgroups where limits.py made them (cgroup v2 ``cpu.stat`` and ``memory.peak``;
cgroup v1 ``cpuacct.usage`` and ``memory.max_usage_in_bytes``), else from procfs: the user+system time of every
live process under the sandbox's nsinit, each with the time of the children it has reaped (``cutime`` and
``cstime``, which is where the time of every finished command ends up), and the largest resident peak
(``VmHWM``) among them. The writable layer's bytes are its tmpfs's used blocks (``statvfs``).

Reading is a few small files (cgroups) or one pass over /proc (procfs); no sampling thread, so the cost is
paid only when asked (docs/benchmarks.md "Cost per rollout" measures it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    """A sandbox's use of the host so far (since it started)."""

    cpu_s: float | None
    """User + system CPU seconds of every process the sandbox ran; None when nothing could be read."""
    peak_bytes: int | None
    """Peak memory: the memory cgroup's peak (pages of its tmpfs layers included), or with procfs the largest
    single process's peak resident size; None when unknown."""
    upper_bytes: int | None
    """Bytes in use in the writable layer (what the sandbox wrote and kept); None when not a tmpfs upper."""
    source: str
    """Where cpu_s and peak_bytes came from: 'cgroup v2', 'cgroup v1' or 'procfs'."""


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def from_cgroups(dirs: list[str]) -> tuple[float | None, int | None, str] | None:
    """(cpu_s, peak_bytes, source) from the sandbox's cgroup folders; None when they say nothing."""
    for path in dirs:
        stat = os.path.join(path, "cpu.stat")
        if os.path.exists(os.path.join(path, "memory.peak")) or _usage_usec(stat) is not None:  # v2: one folder
            usec = _usage_usec(stat)
            peak = _read_int(os.path.join(path, "memory.peak"))
            return (usec / 1e6 if usec is not None else None), peak, "cgroup v2"
    cpu = peak = None
    for path in dirs:
        if cpu is None and os.path.exists(os.path.join(path, "cpuacct.usage")):
            ns = _read_int(os.path.join(path, "cpuacct.usage"))
            cpu = ns / 1e9 if ns is not None else None
        if peak is None and os.path.exists(os.path.join(path, "memory.max_usage_in_bytes")):
            peak = _read_int(os.path.join(path, "memory.max_usage_in_bytes"))
    if cpu is None and peak is None:
        return None
    return cpu, peak, "cgroup v1"


def _usage_usec(stat: str) -> int | None:
    try:
        with open(stat) as f:
            for line in f:
                if line.startswith("usage_usec "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _read_small(path: str) -> bytes | None:
    """A small procfs file's bytes (os.open/os.read: half the time of open() over every process of a host)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 8192)
    except OSError:
        return None
    finally:
        os.close(fd)


def from_procfs(root_pid: int) -> tuple[float | None, int | None, str]:
    """(cpu_s, peak_bytes, 'procfs') over ``root_pid`` and every live process below it."""
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        text = _read_small(f"/proc/{name}/stat")
        if text is None:
            continue  # gone meanwhile
        # the command name may hold spaces and parentheses: the fields start after the last ')'
        fields = text.rpartition(b")")[2].split()
        parents[int(name)] = int(fields[1])
        times[int(name)] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    if root_pid not in parents:
        return None, None, "procfs"
    below = {root_pid}
    changed = True  # pids wrap, so a child may have a lower pid than its parent: repeat until nothing is added
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in below and pid not in below:
                below.add(pid)
                changed = True
    peak = 0
    for pid in below:
        status = _read_small(f"/proc/{pid}/status") or b""
        start = status.find(b"\nVmHWM:")
        if start >= 0:
            peak = max(peak, int(status[start + 7 :].split(maxsplit=1)[0]) * 1024)
    return sum(times[p] for p in below) / _TICK, peak or None, "procfs"


def upper_bytes(upper_path: str) -> int | None:
    """Used bytes of the tmpfs at ``upper_path`` (as the host reaches it), None when it cannot be read."""
    try:
        st = os.statvfs(upper_path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def reset_peak(cgroup_dirs: list[str]) -> None:
    """Start the memory peak afresh where the kernel allows it (cgroup v1 ``memory.max_usage_in_bytes``; cgroup
    v2's ``memory.peak`` resets only per open file, so there it stays the peak since the sandbox started)."""
    for path in cgroup_dirs:
        target = os.path.join(path, "memory.max_usage_in_bytes")
        if os.path.exists(target):
            try:
                with open(target, "w") as f:
                    f.write("0")
            except OSError:
                pass


def read_usage(cgroup_dirs: list[str], root_pid: int, upper_path: str) -> Usage:
    """The sandbox's usage: cgroups when they hold it, else procfs (see the module's docstring)."""
    found = from_cgroups(cgroup_dirs)
    if found is None or found[0] is None:
        cpu, peak, source = from_procfs(root_pid)
        if found is not None and found[1] is not None:  # a memory cgroup but no CPU accounting one
            peak, source = found[1], f"{found[2]} memory, procfs cpu"
    else:
        cpu, peak, source = found
    return Usage(cpu, peak, upper_bytes(upper_path) if upper_path else None, source)
