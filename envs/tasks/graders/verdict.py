"""The verdict channel of a pytest grading run, host side: a verdict the code under test cannot produce.

In the grading sandbox, ``grade_monitor.py`` (a separate interpreter that imports nothing of the project)
runs ``pytest_runner.py`` (pytest, where the code under test runs) as its child, receives every test report
over a pipe as it happens, judges the stream and prints the verdict signed with an HMAC key that only it and
the host hold: the host writes the key into the sandbox, the monitor reads and deletes it and turns
non-dumpable before the tested process exists, and writes the signed verdict to ``WORKDIR/verdict``. The host
accepts only a verdict whose MAC checks out.

Every run also holds two canary tests the host plants after the agent's diff and the test patch are in, with
random names at a random place among the test files: one planted to pass, one to fail. A report forger that
does not single out the task's own tests (a hook that passes everything, replaced test functions, patched
reports) is caught by them; see docs/tasks.md for what remains.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from swebox.envs.tasks.graders.monitor_loop import shipped

MONITOR = Path(__file__).with_name("grade_monitor.py")
RUNNER = Path(__file__).with_name("pytest_runner.py")
ORIGINS = Path(__file__).with_name("runner_origins.py")
PIN = Path(__file__).with_name("runner_pin.py")
CLEAN_PATH = "/venv/bin:/usr/local/bin:/usr/bin:/bin"
_HEAD = re.compile(rb"SWEBOX-VERDICT ([0-9a-f]{64})")
MAX_VERDICT_BYTES = 64 * 1024 * 1024
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "de", "po", "zu", "be", "ra", "no", "ki", "fe")


@dataclass
class Canaries:
    """The two tests planted in one graded run."""

    file: str
    """Repository-relative path of the planted test file."""
    text: str
    """Its source."""
    expected: dict[str, str] = field(default_factory=dict)
    """Node id -> the status it must get ('passed' or 'failed')."""


@dataclass
class Verdict:
    """What the monitor signed, or why there is nothing to believe."""

    status: str
    """ok (a verified verdict) | missing (no verdict line: the monitor was killed or never ran) | forged."""
    results: dict[str, tuple[str, float, str]] = field(default_factory=dict)
    """Node id -> (status, seconds, message); status: passed | failed | error | skipped | xfailed | xpassed."""
    problems: list[str] = field(default_factory=list)
    """Why the run is incomplete (timeout, crash, early exit, pytest not completing a run, missing files)."""
    tampered: list[str] = field(default_factory=list)
    """Inconsistent report streams, canaries that came out wrong, what the in-process watchdog saw."""
    timed_out: bool = False
    """The monitor stopped the tests at the deadline."""


def word(rng: random.SystemRandom) -> str:
    """A random pronounceable word (the canaries' names: nothing marks them as planted)."""
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(3, 5)))


def plant_canaries() -> Canaries:
    """Two tests with unguessable names (nothing marks them as canaries), in a new folder of the repository."""
    rng = random.SystemRandom()
    folder, module = word(rng), f"test_{word(rng)}_{word(rng)}"
    n = rng.randint(20, 400)
    total = n * (n - 1) // 2
    tests = [
        (f"test_{word(rng)}_{word(rng)}", total, "passed"),
        (f"test_{word(rng)}", total + rng.randint(1, 9), "failed"),
    ]
    rng.shuffle(tests)
    path = f"{folder}/{module}.py"
    text = "".join(f"def {name}():\n    assert sum(range({n})) == {value}\n\n\n" for name, value, _ in tests)
    return Canaries(path, text.rstrip() + "\n", {f"{path}::{name}": status for name, _, status in tests})


def prepare(
    sb,
    workdir: str,
    python: str,
    options: list[str],
    files: list[str],
    timeout: float,
    rewritten: dict[str, str] | None = None,
    plain: dict[str, list[str]] | None = None,
) -> bytes:
    """Write the monitor, the runner, their arguments, the key and the canaries; return the run's key.

    ``rewritten``: test file -> its cached rewritten code (rewrite_cache.entries), for the runner; ``plain``:
    test file -> its tests nothing may wrap, computed once from the same pristine bytes (rewrite_cache.plain_tables):
    the runner parses only the files it is given none for."""
    canaries = plant_canaries()
    sb.exec(f"mkdir -p /testbed/{shlex.quote(canaries.file.split('/')[0])}", timeout=30)
    sb.write_file(f"/testbed/{canaries.file}", canaries.text)
    files = list(files)
    files.insert(random.SystemRandom().randint(0, len(files)), canaries.file)
    key = secrets.token_bytes(32)
    sb.write_file(f"{workdir}/grade_monitor.py", shipped(MONITOR))  # monitor_loop.py inside
    sb.write_file(f"{workdir}/pytest_runner.py", RUNNER.read_bytes())
    sb.write_file(f"{workdir}/runner_origins.py", ORIGINS.read_bytes())
    sb.write_file(f"{workdir}/runner_pin.py", PIN.read_bytes())
    args = {"options": options, "files": files, "rewritten": rewritten or {}, "plain": plain or {}}
    sb.write_file(f"{workdir}/args.json", json.dumps(args))
    runner_argv = [python, "-I", "-B", f"{workdir}/pytest_runner.py", f"{workdir}/args.json"]
    spec = {"argv": runner_argv, "timeout": timeout, "canaries": canaries.expected, "rewritten": rewritten or {}}
    sb.write_file(f"{workdir}/monitor.json", json.dumps(spec))
    sb.write_file(f"{workdir}/key", key, mode=0o600)
    return key


def clean_vars(workdir: str) -> dict[str, str]:
    """The fixed environment grading's processes run under (the env layer's /venv first on PATH, HOME in the
    run's folder): nothing of it comes from the agent's sandbox."""
    return {
        "PATH": CLEAN_PATH,
        "HOME": f"{workdir}/home",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
    }


def clean_env(workdir: str) -> str:
    """The ``env -i`` assignments of :func:`clean_vars`."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in clean_vars(workdir).items())


def command(python: str, workdir: str) -> str:
    """The shell command that starts the monitor in a clean environment (``env -i``, fixed PATH)."""
    return (
        f"mkdir -p {workdir}/home && cd /testbed && env -i {clean_env(workdir)} {shlex.quote(python)} -I -S -B "
        f"{workdir}/grade_monitor.py {workdir}"
    )


def read_verdict(data: bytes | None, key: bytes) -> Verdict:
    """The verified verdict in the monitor's ``verdict`` file (None: there is none); unsigned is forged."""
    if data is None:
        return Verdict("missing", problems=["no verdict from the grade monitor (it was killed or never ran)"])
    head, _, payload = data.partition(b"\n")
    found = _HEAD.fullmatch(head)
    if found is None or not hmac.compare_digest(found[1], hmac.new(key, payload, hashlib.sha256).hexdigest().encode()):
        return Verdict("forged", tampered=["the verdict file is not signed with the run's key"])
    record = json.loads(payload)
    results = {k: (str(v[0]), float(v[1]), str(v[2])) for k, v in record["results"].items()}
    return Verdict("ok", results, list(record["problems"]), list(record["tampered"]), bool(record["timed_out"]))
