"""Canary test files for log-graded runs of Node's test runner (``node --test`` over test folders).

Node's runner reports one result per test file, so a canary is a file: two files with random names are
written into a folder the command runs, after the agent's diff and ``test_patch`` are in, one asserting a sum
that holds and one a sum that does not (``LogCanaries.expected``: name -> PASSED/FAILED). Code under test
that makes every test file pass also passes the one planted to fail; code that leaves early or prints a fake
run misses both: tampered, reward 0. Other JavaScript commands (mocha ``-g``, jest with a path) select tests
the canaries would not be among, so their runs get none (``LogCanaries.skipped`` says why).
"""

from __future__ import annotations

import random
import shlex

from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.graders.verdict import word
from swebox.envs.tasks.schema import Task


def folders(test_cmd: str) -> list[str]:
    """The folder arguments of a ``node --test`` command ([] for any other command)."""
    try:
        argv = shlex.split(test_cmd)
    except ValueError:
        return []
    if len(argv) < 2 or argv[0] != "node" or "--test" not in argv or any(c in test_cmd for c in ";&|`$"):
        return []
    return [a.rstrip("/") for a in argv[1:] if not a.startswith("-") and not a.endswith((".js", ".mjs", ".cjs"))]


def plant(sb: Sandbox, task: Task) -> tuple[str, dict[str, str], str]:
    """Write the two canary files into one of :func:`folders` that exists in /testbed: (the folder, canary name
    -> the status it must get, ''), or ('', {}, why none were planted) — log_canaries.LogCanaries's fields."""
    rng = random.SystemRandom()
    candidates = folders(task.test_cmd)
    rng.shuffle(candidates)
    for folder in candidates:
        q = shlex.quote(f"/testbed/{folder}")
        if sb.exec(f"test -d {q} && ! test -L {q}", timeout=30).exit_code != 0:
            continue
        n = rng.randint(20, 400)
        total = n * (n - 1) // 2
        holds, fails = f"{word(rng)}_{word(rng)}", f"{word(rng)}_{word(rng)}_{word(rng)}"  # never the same name
        planted = {holds: total, fails: total + rng.randint(1, 9)}
        for name, value in planted.items():
            sb.write_file(
                f"/testbed/{folder}/{name}.js",
                f"'use strict';\nlet s = 0;\nfor (let i = 0; i < {n}; i++) s += i;\n"
                f"require('assert').strictEqual(s, {value});\n",
            )
        return folder, {name: "PASSED" if value == total else "FAILED" for name, value in planted.items()}, ""
    return "", {}, "the test command is not `node --test` over a test folder: no canary file would run"
