"""The shapes fixture project of the learning tests: four buggy functions, K candidate fixes for each, shown in
ORDER (the fix of task i at position ORDER[i][0]); its env layer is tests/conftest.py's ``shapes_env``."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

from swebox.envs.cache import EnvSpec
from swebox.envs.tasks import save_jsonl

K = 4
BUGGY = {  # function -> (buggy body, [candidate bodies]); candidate CORRECT[i] of task i is the fix
    "area_square": ("s + s", ["s * s", "s ** 3", "2 * s", "s * s + 1"]),
    "area_rect": ("w + h", ["w * h", "w * w", "h * h", "w * h - 1"]),
    "perimeter_square": ("3 * s", ["4 * s", "s * 4 + 1", "2 * s", "s + 4"]),
    "perimeter_rect": ("2 * w + h", ["2 * (w + h)", "2 * w * h", "w + h", "2 * (w - h)"]),
}
ORDER = [[2, 0, 3, 1], [0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]]  # candidate positions: the fix is at ORDER[i][0]
ARGS = {"area_square": "s", "area_rect": "w, h", "perimeter_square": "s", "perimeter_rect": "w, h"}
CHECKS = {
    "area_square": "area_square(3) == 9 and area_square(1) == 1",
    "area_rect": "area_rect(2, 5) == 10 and area_rect(3, 3) == 9",
    "perimeter_square": "perimeter_square(3) == 12",
    "perimeter_rect": "perimeter_rect(2, 5) == 14 and perimeter_rect(1, 1) == 4",
}


def _ops(bodies: dict[str, str]) -> str:
    fns = [f"def {name}({ARGS[name]}):\n    return {body}\n" for name, body in bodies.items()]
    return "\n\n".join([*fns, "def double(x):\n    return 2 * x\n"])


TESTS = "\n\n".join(
    ["from shapes.ops import *  # noqa: F403\n"]
    + [f"def test_{name}():\n    assert {check}\n" for name, check in CHECKS.items()]
    + ["def test_double():\n    assert double(4) == 8\n"]
)


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout


def candidate_diffs(tmp: Path) -> dict[str, list[str]]:
    """For each buggy function, the K candidate diffs in their shown order (made with git on the host)."""
    repo = tmp / "diffs"
    (repo / "shapes").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    buggy = {name: b for name, (b, _) in BUGGY.items()}
    (repo / "shapes" / "ops.py").write_text(_ops(buggy))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    out = {}
    for i, (name, (_, bodies)) in enumerate(BUGGY.items()):
        diffs = []
        for position in range(K):
            body = bodies[ORDER[i].index(position)]
            (repo / "shapes" / "ops.py").write_text(_ops({**buggy, name: body}))
            diffs.append(_git(repo, "diff"))
        _git(repo, "checkout", "-q", "--", ".")
        out[name] = diffs
    return out


SHAPES_ENV = EnvSpec(source="/fixture/shapes", commit="0123456789abcdef")
"""A stand-in env spec: its key names the shapes layer's folder in a layer-dirs folder."""


def shapes_files(shapes_env, folder: Path, count: int) -> Path:
    """The first ``count`` shapes tasks (env SHAPES_ENV) written to folder/tasks.jsonl, next to folder/layers: a
    layer-dirs folder holding the env layer under its key (what ``swebox eval --layers`` takes)."""
    layer, tasks, _ = shapes_env
    (folder / "layers").mkdir()
    os.symlink(layer.path, folder / "layers" / SHAPES_ENV.key())
    save_jsonl([dataclasses.replace(t, env=SHAPES_ENV) for t in tasks[:count]], folder / "tasks.jsonl")
    return folder / "layers"
