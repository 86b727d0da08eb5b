"""Idle sandboxes: what N live, idle swebox sandboxes cost the host (`swebox bench sandbox --idle 256`).

Starts N overlay sandboxes over the bench environment, runs `true` in each (so every shell is up), then for
`--idle-seconds` does nothing and measures what their processes (nsinit, the session's pid 1, the shell, and
everything below them, plus once the zygote they were all forked from) used: CPU time of all of them together
as a share of one core, processes per sandbox, and PSS per sandbox (`/proc/PID/smaps_rollup`, shared pages
split between their users), with the load average.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy, spawner


def _tree(pid: int) -> list[int]:
    """pid and every process below it (by /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except OSError:
        return 0


def idle(env: Path, count: int, seconds: float) -> int:
    sandboxes = []
    try:
        for i in range(count):
            try:
                sb = Sandbox([Layer(env)], SandboxPolicy(backend="overlay")).start()
            except Exception as exc:
                raise SystemExit(f"sandbox {i + 1} of {count} did not start ({i} live): {exc}") from None
            sandboxes.append(sb)
            if sb.exec("true").exit_code != 0:
                raise SystemExit("`true` failed in a sandbox")
        time.sleep(2.0)  # let the starts' own work settle
        # the zygote every nsinit was forked from is shared by all of them: its memory and CPU count once
        pids = [spawner.zygote_pid(), *(p for sb in sandboxes for p in _tree(sb._proc.pid))]
        load_before = os.getloadavg()
        cpu0, t0 = _cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = _cpu_seconds(pids), time.monotonic()
        pss = sum(_pss_kb(p) for p in pids)
        share = (cpu1 - cpu0) / (t1 - t0)
        print("| live idle sandboxes | processes each | PSS each | CPU of all, share of one core | per sandbox |")
        print("|---|---|---|---|---|")
        print(
            f"| {count} | {len(pids) / count:.1f} | {pss / count / 1024:.2f} MB | {share * 100:.2f}% | "
            f"{share / count * 100:.4f}% |"
        )
        print(
            f"\nidle for {t1 - t0:.1f} s; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
            f"{os.cpu_count()} CPUs"
        )
    finally:
        for sb in sandboxes:
            sb.close()
    return 0
