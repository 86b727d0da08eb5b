"""bubblewrap as the peer of `swebox bench sandbox`: the same environment, in the same run, rep by rep interleaved.

bubblewrap (`bwrap`) is the sandbox people pick on one machine. It sees the same tree as a swebox sandbox: the
layer's top-level folders and the host binds swebox itself would make (`rootfs.binds`: /usr, /bin -> usr/bin,
..., the venv's interpreter), plus a fresh /proc, /dev, and a private tmpfs /tmp, with every namespace unshared.
Debian's bubblewrap 0.8 has no `--overlay`: the layer is bound read-only, so its agent could not edit the
repository (a weaker peer than swebox's copy-on-write root, and a cheaper one); the variant that ran is printed.

Rows: start -> first `true` done (swebox: `Sandbox.start()` + `exec("true")`; bwrap: one `bwrap ... true`);
the same with a shell on both sides (bwrap: a new bwrap running bash, which runs `true` sent on its stdin; a
swebox sandbox always starts its persistent bash, so its side is another sample of the first row);
reset -> first `true` done (swebox: `reset()` + `exec("true")`, with the next session prepared
(``SandboxPolicy.warm_reset``, the default) and, on a second sandbox, without; bwrap has no reset: a new process per
"reset", the same as its start); `exec("true")` in a live shell (bwrap: a bash inside bwrap reading commands on
stdin); the same with a 4 KB command (an agent's heredoc: a shell reads its stdin pipe one byte at a time, which
swebox's command memfd avoids). Between two resets of one sandbox the rest of the rep runs (tens of ms), as an
agent's turns would.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy, rootfs, wait_for_closes

# After a warm reset, nsinit prepares the next session 20 ms later (~10 ms of CPU): the rows wait this long after
# one so that no row is timed while that background work runs (an agent's next reset comes seconds later)
SETTLE_S = 0.05
VARIANT = "read-only binds + tmpfs /tmp (no copy-on-write: bubblewrap < 0.10 has no --overlay)"
MARKER = b"__swebox_bench_done__"
LONG_COMMAND = ": '" + "x" * 4096 + "'"


def bwrap_version() -> str | None:
    """`bwrap --version`'s answer, or None when bubblewrap is not installed."""
    if shutil.which("bwrap") is None:
        return None
    return subprocess.run(["bwrap", "--version"], capture_output=True, text=True, check=True).stdout.strip()


def bwrap_argv(layer: Path, policy: SandboxPolicy, command: list[str]) -> list[str]:
    """A bwrap command line that shows `command` the tree a swebox sandbox on `layer` would see."""
    argv = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--setenv",
        "PATH",
        "/venv/bin:/usr/local/bin:/usr/bin:/bin",
    ]
    for bind in rootfs.binds(policy, [Layer(layer)]):
        if bind["kind"] == "symlink":
            argv += ["--symlink", bind["target"], bind["dst"]]
        else:
            argv += ["--ro-bind", bind["src"], bind["dst"]]
    for entry in sorted(os.listdir(layer)):
        if os.path.isdir(layer / entry):
            argv += ["--ro-bind", str(layer / entry), f"/{entry}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/", *command]
    return argv


class BwrapShell:
    """One bash inside bwrap that runs commands sent on its stdin, like swebox's session shell."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def exec(self, command: str) -> bytes:
        self.proc.stdin.write(f"{command}; echo {MARKER.decode()}\n".encode())
        self.proc.stdin.flush()
        out = b""
        while not out.endswith(MARKER + b"\n"):
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise SystemExit(f"the shell inside bwrap exited: {out[-2000:]!r}")
            out += chunk
        return out[: -len(MARKER) - 1]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def _run_true(argv: list[str]) -> None:
    result = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL, capture_output=True)
    if result.returncode != 0:
        raise SystemExit(f"bwrap failed ({result.returncode}): {result.stderr.decode()[-2000:]}")


def _swebox_start(layer: Path, policy: SandboxPolicy, wait: bool = True) -> tuple[float, float]:
    """Seconds of start -> first `true` done, and of the close(wait=wait) after it."""
    sb = Sandbox([Layer(layer)], policy)
    try:
        start = time.perf_counter()
        sb.start()
        _check(sb.exec("true"))
        started = time.perf_counter() - start
    finally:
        start = time.perf_counter()
        sb.close(wait=wait)
    return started, time.perf_counter() - start


def _bwrap_shell_start(argv: list[str]) -> float:
    """Seconds from starting a bwrap that runs bash to its first `true` done (then it is closed, untimed)."""
    start = time.perf_counter()
    shell = BwrapShell(argv)
    shell.exec("true")
    started = time.perf_counter() - start
    shell.close()
    return started


def _bwrap_close(argv: list[str]) -> float:
    """Seconds to end a bwrap shell that ran a command (its stdin closed, waited for)."""
    shell = BwrapShell(argv)
    shell.exec("true")
    return _timed(shell.close)


def _check(result) -> None:
    if result.exit_code != 0:
        raise SystemExit(f"benchmark command failed: {result.output[-2000:]}")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(layer: Path, reps: int) -> dict[str, dict[str, list[float]]] | None:
    """Samples per row and system (swebox overlay, bwrap), or None (with a note) where bwrap is absent."""
    version = bwrap_version()
    if version is None:
        print("bubblewrap: skipped (no `bwrap` on PATH; `apt-get install bubblewrap` adds its rows)")
        return None
    policy = SandboxPolicy(backend="overlay")
    once = bwrap_argv(layer, policy, ["true"])
    rows = (
        "start -> first `true`",
        "reset -> first `true`",
        "reset, warm_reset off",
        'exec("true")',
        "close()",
        "close(wait=False)",
        "start, shell -> `true`",
        "exec(4 KB command)",
    )
    samples: dict[str, dict[str, list[float]]] = {row: {"swebox": [], "bwrap": []} for row in rows}
    cold_policy = dataclasses.replace(policy, warm_reset=False)
    with Sandbox([Layer(layer)], policy) as sb, Sandbox([Layer(layer)], cold_policy) as cold:
        shell_argv = bwrap_argv(layer, policy, ["bash", "--norc", "--noprofile"])
        shell = BwrapShell(shell_argv)
        try:
            if shell.exec("/venv/bin/python -c 'print(1)'") != b"1\n":
                raise SystemExit("the venv does not run inside bwrap: its tree differs from the sandbox's")
            _check(sb.exec("true"))
            sb.reset()  # the first reset prepares the next session; the rows measure the ones after it
            _check(cold.exec("true"))
            for rep in range(reps):  # which system goes first flips rep by rep: noise and caches hit both alike
                systems = ("swebox", "bwrap") if rep % 2 == 0 else ("bwrap", "swebox")
                for system in systems:
                    if system == "swebox":
                        started, closed = _swebox_start(layer, policy)
                        samples[rows[0]]["swebox"].append(started)
                        samples[rows[4]]["swebox"].append(closed)
                        samples[rows[5]]["swebox"].append(_swebox_start(layer, policy, wait=False)[1])
                        wait_for_closes()  # its cleanup runs now, not during the next row
                        samples[rows[1]]["swebox"].append(_timed(lambda: (sb.reset(), _check(sb.exec("true")))))
                        time.sleep(SETTLE_S)
                        samples[rows[2]]["swebox"].append(_timed(lambda: (cold.reset(), _check(cold.exec("true")))))
                        samples[rows[3]]["swebox"].append(_timed(lambda: _check(sb.exec("true"))))
                        samples[rows[6]]["swebox"].append(_swebox_start(layer, policy)[0])
                        samples[rows[7]]["swebox"].append(_timed(lambda: _check(sb.exec(LONG_COMMAND))))
                    else:
                        samples[rows[0]]["bwrap"].append(_timed(lambda: _run_true(once)))
                        samples[rows[1]]["bwrap"].append(_timed(lambda: _run_true(once)))
                        samples[rows[2]]["bwrap"].append(_timed(lambda: _run_true(once)))
                        samples[rows[3]]["bwrap"].append(_timed(lambda: shell.exec("true")))
                        samples[rows[4]]["bwrap"].append(_bwrap_close(shell_argv))
                        samples[rows[5]]["bwrap"].append(_bwrap_close(shell_argv))  # it has one kind of close
                        samples[rows[6]]["bwrap"].append(_bwrap_shell_start(shell_argv))
                        samples[rows[7]]["bwrap"].append(_timed(lambda: shell.exec(LONG_COMMAND)))
        finally:
            shell.close()
    print(f"bubblewrap: {version}, variant: {VARIANT}")
    return samples


def report(samples: dict[str, dict[str, list[float]]], reps: int, pct) -> None:
    header = (
        f"| {'operation (p50)':<22} | {'swebox p50':>10} | {'swebox p99':>10} | {'bwrap p50':>10} | "
        f"{'bwrap p99':>10} | {'swebox/bwrap (p50)':>18} |"
    )
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    for row, by_system in samples.items():
        s, b = by_system["swebox"], by_system["bwrap"]
        print(
            f"| {row:<22} | {pct(s, 0.5) * 1e3:>7.2f} ms | {pct(s, 0.99) * 1e3:>7.2f} ms | "
            f"{pct(b, 0.5) * 1e3:>7.2f} ms | {pct(b, 0.99) * 1e3:>7.2f} ms | {pct(s, 0.5) / pct(b, 0.5):>17.2f}x |"
        )
    print(
        f"\nreps: {reps} per row and system, interleaved; load average {os.getloadavg()[0]:.1f}; "
        f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs"
    )
