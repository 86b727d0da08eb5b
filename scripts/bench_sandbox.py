"""Sandbox start/reset/exec for the overlay backend against the extract (paper-style) backend, side by side.

Builds (once, cached under --work; scripts/bench_env.py) a realistic environment: a virtualenv with numpy, pytest
and requests plus a real project's source tree (Django's sdist), about 120 MB in more than 10,000 files; and a copy
ten times larger. Then measures, in one run, p50/p99 of: start, reset (back to back, and 50 ms apart: time for the
overlay backend to prepare the next session, SandboxPolicy.warm_reset), exec("true"), and exec of a Python import,
for both backends, with their ratio; and overlay reset on the 10x environment. Usage: `swebox bench sandbox`.
`--compare-seccomp` instead measures the cost of the seccomp filter: reset (each new session installs it) and exec
of commands with the filter on and off (overlay backend), alternating rep by rep. `--compare-cpu-share` measures a
sandbox's `exec(python -c pass)` while another sandbox runs a CPU hog (16 spinning processes, each in a session of
its own), with a CPU cgroup per sandbox (cpu_weight=100) and without (cpu_weight=0). `--idle N` measures N live,
idle sandboxes (`scripts/bench_idle.py`). `--cycles SECONDS` counts start -> exec -> close cycles per second, one
thread per CPU.
Every full run ends with bubblewrap side by side with swebox (`scripts/bench_bwrap.py`; skipped with a note where
`bwrap` is absent); `--compare-bwrap` runs only that comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy, wait_for_closes

from . import bench_bwrap, bench_idle
from .bench_env import archive, build_environment, scaled_copy, size_of

IMPORT_CMD = "/venv/bin/python -c 'import numpy, pytest, requests'"
# one fstatat per file of the 12k-file environment: the syscall-heaviest common thing a test run does
STAT_CMD = "du -s /venv /testbed >/dev/null"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--work",
        default=os.path.expanduser("~/.cache/swebox/bench-sandbox"),
        help="folder for the generated environments (kept between runs)",
    )
    parser.add_argument("--reps", type=int, default=100, help="repetitions per measurement (default 100)")
    parser.add_argument(
        "--extract-reps",
        type=int,
        default=20,
        help="repetitions of start and reset for the extract backend, which take seconds each "
        "(default 20; its exec measurements use --reps)",
    )
    parser.add_argument("--scale", type=int, default=10, help="size factor of the large environment (default 10)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the environment's venv")
    parser.add_argument(
        "--compare-seccomp",
        action="store_true",
        help="only measure reset and exec with the seccomp filter on against off (overlay)",
    )
    parser.add_argument(
        "--compare-cpu-share",
        action="store_true",
        help="only measure a sandbox's exec under another sandbox's CPU hog, with and without a CPU cgroup per sandbox",
    )
    parser.add_argument(
        "--extract-resets",
        type=int,
        default=0,
        metavar="N",
        help="only time start and N resets (each + exec of `true`) of one extract sandbox on the "
        "environment's folder, to see whether restores slow down or fail over time",
    )
    parser.add_argument(
        "--compare-bwrap",
        action="store_true",
        help="only measure start, reset and exec against bubblewrap on the same environment",
    )
    parser.add_argument(
        "--idle",
        type=int,
        default=0,
        metavar="N",
        help="only measure N live, idle sandboxes: CPU of all, processes and PSS per sandbox",
    )
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="how long --idle watches (default 20)")
    parser.add_argument(
        "--cycles",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="only count start -> exec(true) -> close cycles per second for SECONDS, in as many threads as CPUs",
    )
    parser.set_defaults(func=run)


def timed(fn, reps: int) -> list[float]:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def measure(layers: list[Layer], policy: SandboxPolicy, reps: int, restore_reps: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"start": []}
    for _ in range(restore_reps):
        sb = Sandbox(layers, policy)
        start = time.perf_counter()
        sb.start()
        results["start"].append(time.perf_counter() - start)
        sb.close()
    with Sandbox(layers, policy) as sb:
        sb.exec(IMPORT_CMD)  # warm the page cache the same way for both backends
        results["reset"] = timed(sb.reset, restore_reps)  # back to back: no time to prepare the next session
        if policy.backend == "overlay" and policy.warm_reset:
            results["reset, 50 ms apart"] = []
            for _ in range(restore_reps):  # as between an agent's turns: the next session is ready
                time.sleep(0.05)
                results["reset, 50 ms apart"] += timed(sb.reset, 1)
        else:  # extract keeps no prepared session: its resets are alike
            results["reset, 50 ms apart"] = results["reset"]
        results['exec("true")'] = timed(lambda: sb.exec("true"), reps)
        results["exec(python import)"] = timed(lambda: _check(sb.exec(IMPORT_CMD)), reps)
    return results


def _check(result) -> None:
    if result.exit_code != 0:
        raise SystemExit(f"benchmark command failed: {result.output[-2000:]}")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def compare_seccomp(env: Path, reps: int) -> int:
    """p50/p99 of reset and exec with the filter on and off; the two sandboxes alternate, and which goes first
    flips rep by rep, so machine noise and the warmth of the caches hit both alike."""
    commands = {'exec("true")': "true", "exec(python import)": IMPORT_CMD, "exec(du, 12k fstatat)": STAT_CMD}
    samples: dict[tuple[str, bool], list[float]] = {
        (name, on): [] for name in ("reset", *commands) for on in (True, False)
    }
    with (
        Sandbox([Layer(env)], SandboxPolicy(backend="overlay", seccomp=True)) as on_sb,
        Sandbox([Layer(env)], SandboxPolicy(backend="overlay", seccomp=False)) as off_sb,
    ):
        print(f"on: {on_sb.limits_in_force()['syscalls']}\noff: {off_sb.limits_in_force()['syscalls']}")
        pairs = [((True, on_sb), (False, off_sb))[:: 1 if rep % 2 == 0 else -1] for rep in range(reps)]
        for pair in pairs:  # a new session installs the filter; its own loop: the first exec after a reset is slow
            for on, sb in pair:
                samples[("reset", on)] += timed(sb.reset, 1)
        for command in commands.values():  # warm the page cache and the sessions the same way
            _check(on_sb.exec(command))
            _check(off_sb.exec(command))
        for pair in pairs:
            for name, command in commands.items():
                for on, sb in pair:
                    samples[(name, on)] += timed(lambda sb=sb, command=command: _check(sb.exec(command)), 1)
    header = (
        f"| {'operation':<22} | {'seccomp on p50':>14} | {'on p99':>9} | {'seccomp off p50':>15} | "
        f"{'off p99':>9} | {'on/off (p50)':>12} |"
    )
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    for name in ("reset", *commands):
        on, off = samples[(name, True)], samples[(name, False)]
        print(
            f"| {name:<22} | {pct(on, 0.5) * 1e3:>11.2f} ms | {pct(on, 0.99) * 1e3:>6.2f} ms | "
            f"{pct(off, 0.5) * 1e3:>12.2f} ms | {pct(off, 0.99) * 1e3:>6.2f} ms | "
            f"{pct(on, 0.5) / pct(off, 0.5):>11.3f}x |"
        )
    print(f"\nreps: {reps} per row and setting; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    return 0


HOG = "for i in $(seq 16); do setsid sh -c 'while :; do :; done' >/dev/null 2>&1 & done"
PASS_CMD = "/venv/bin/python -c pass"


def compare_cpu_share(env: Path, reps: int) -> int:
    """p50/p99 of exec(python -c pass) in one sandbox: alone, and while another runs a 16-session CPU hog, with a
    CPU cgroup per sandbox and without; the two settings alternate rep by rep."""
    samples: dict[str, list[float]] = {"idle": [], "hog, cpu_weight=100": [], "hog, cpu_weight=0": []}
    policies = {weight: SandboxPolicy(backend="overlay", cpu_weight=weight) for weight in (100, 0)}
    layers = [Layer(env)]
    with (
        Sandbox(layers, policies[100]) as hog_on,
        Sandbox(layers, policies[100]) as victim_on,
        Sandbox(layers, policies[0]) as hog_off,
        Sandbox(layers, policies[0]) as victim_off,
    ):
        print(
            f"cpu_weight=100: {hog_on.limits_in_force()['cpu_share']}\n"
            f"cpu_weight=0: {hog_off.limits_in_force()['cpu_share']}"
        )
        for victim in (victim_on, victim_off):
            _check(victim.exec(PASS_CMD))  # warm the page cache
        samples["idle"] = timed(lambda: _check(victim_on.exec(PASS_CMD)), reps)
        pairs = [(100, hog_on, victim_on), (0, hog_off, victim_off)]
        for rep in range(reps):
            for weight, hog, victim in pairs[:: 1 if rep % 2 == 0 else -1]:
                _check(hog.exec(HOG))
                time.sleep(0.2)  # the hog is spinning
                samples[f"hog, cpu_weight={weight}"] += timed(lambda v=victim: _check(v.exec(PASS_CMD)), 1)
                hog.reset()  # every hog process is gone
    header = f"| {'victim exec(python -c pass)':<28} | {'p50':>9} | {'p99':>9} | {'p50 / idle p50':>14} |"
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    idle = pct(samples["idle"], 0.5)
    for name, values in samples.items():
        print(
            f"| {name:<28} | {pct(values, 0.5) * 1e3:>6.1f} ms | {pct(values, 0.99) * 1e3:>6.1f} ms | "
            f"{pct(values, 0.5) / idle:>13.1f}x |"
        )
    print(f"\nreps: {reps} per row; load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    return 0


def run(args: argparse.Namespace) -> int:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"building the environments under {work} (cached) ...", flush=True)
    env = build_environment(work, args.python)
    if args.compare_seccomp:
        return compare_seccomp(env, args.reps)
    if args.compare_cpu_share:
        return compare_cpu_share(env, args.reps)
    if args.compare_bwrap:
        return compare_bwrap(env, args.reps)
    if args.extract_resets:
        return extract_resets(env, args.extract_resets)
    if args.idle:
        return bench_idle.idle(env, args.idle, args.idle_seconds)
    if args.cycles:
        return cycles(env, args.cycles)
    big = scaled_copy(env, work, args.scale)
    env_archive = archive(env)
    files, total = size_of(env)
    big_files, big_total = size_of(big)
    print(
        f"environment: {total / 1e6:.0f} MB in {files} files (tar.gz {env_archive.stat().st_size / 1e6:.0f} MB); "
        f"large: {big_total / 1e6:.0f} MB in {big_files} files",
        flush=True,
    )

    overlay = measure([Layer(env)], SandboxPolicy(backend="overlay"), args.reps, args.reps)
    extract = measure([Layer(env, archive=env_archive)], SandboxPolicy(backend="extract"), args.reps, args.extract_reps)
    # the size comparison alternates the two sandboxes rep by rep, so machine noise hits both alike
    small_reset, big_reset = [], []
    with (
        Sandbox([Layer(env)], SandboxPolicy(backend="overlay")) as small_sb,
        Sandbox([Layer(big)], SandboxPolicy(backend="overlay")) as big_sb,
    ):
        for _ in range(args.reps):
            small_reset += timed(small_sb.reset, 1)
            big_reset += timed(big_sb.reset, 1)

    header = (
        f"| {'operation':<22} | {'overlay p50':>11} | {'overlay p99':>11} | {'extract p50':>11} | "
        f"{'extract p99':>11} | {'extract/overlay (p50)':>21} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c) + 0) for c in header.split("|")[1:-1]) + "|")
    for name in overlay:
        o50, o99, e50, e99 = (
            pct(overlay[name], 0.5),
            pct(overlay[name], 0.99),
            pct(extract[name], 0.5),
            pct(extract[name], 0.99),
        )
        print(
            f"| {name:<22} | {o50 * 1e3:>8.2f} ms | {o99 * 1e3:>8.2f} ms | {e50 * 1e3:>8.1f} ms | "
            f"{e99 * 1e3:>8.1f} ms | {e50 / o50:>20.1f}x |"
        )
    b50, b99 = pct(big_reset, 0.5), pct(big_reset, 0.99)
    print(
        f"| {f'reset, {args.scale}x environment':<22} | {b50 * 1e3:>8.2f} ms | {b99 * 1e3:>8.2f} ms | "
        f"{'':>11} | {'':>11} | {b50 / pct(small_reset, 0.5):>11.2f}x of 1x |"
    )
    print(
        f"\nreps: {args.reps} (extract start and reset: {args.extract_reps}); environment {total / 1e6:.0f} MB / "
        f"{files} files; large {big_total / 1e6:.0f} MB / {big_files} files; python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs\n"
    )
    return compare_bwrap(env, args.reps)


def _cycle_loop(env: Path, deadline: float, wait: bool) -> int:
    count = 0
    while time.monotonic() < deadline:
        sb = Sandbox([Layer(env)], SandboxPolicy(backend="overlay")).start()
        try:
            _check(sb.exec("true"))
        finally:
            sb.close(wait=wait)
        count += 1
    return count


def cycles(env: Path, seconds: float) -> int:
    """start -> exec("true") -> close, over and over in one thread per CPU for `seconds`: cycles per second, with
    close() waiting, and with close(wait=False), whose background cleanup is waited for inside the time counted."""
    from concurrent.futures import ThreadPoolExecutor

    threads = os.cpu_count() or 1
    for wait in (True, False):
        start = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:  # a failure in any thread is raised here
            total = sum(pool.map(_cycle_loop, [env] * threads, [start + seconds] * threads, [wait] * threads))
        wait_for_closes()
        elapsed = time.monotonic() - start
        print(
            f"start -> exec(true) -> close(wait={wait}): {total / elapsed:.1f} cycles/s over {elapsed:.1f} s in "
            f"{threads} threads ({total} cycles); load average {os.getloadavg()[0]:.1f}"
        )
    return 0


def extract_resets(env: Path, resets: int) -> int:
    """Start, then every reset (+ the first `true`) of one extract sandbox on the folder layer, in order."""
    sb = Sandbox([Layer(env)], SandboxPolicy(backend="extract"))
    try:
        times = [timed(lambda: _check(sb.start().exec("true")), 1)[0]]
        times += [timed(lambda: (sb.reset(), _check(sb.exec("true"))), 1)[0] for _ in range(resets)]
    finally:
        sb.close()
    print(
        f"extract start {times[0]:.2f} s; resets: "
        + ", ".join(f"{t:.2f}" for t in times[1:])
        + f" s; p50 {pct(times[1:], 0.5):.2f} s; load average {os.getloadavg()[0]:.1f}"
    )
    return 0


def compare_bwrap(env: Path, reps: int) -> int:
    samples = bench_bwrap.compare(env, reps)
    if samples is not None:
        bench_bwrap.report(samples, reps, pct)
    return 0
