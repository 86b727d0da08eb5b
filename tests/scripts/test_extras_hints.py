"""A command that needs an optional extra that is not installed ends with one line naming the extra and the pip
command (exit 2), not a ModuleNotFoundError traceback. The extra's module is made missing the way Python reports
an absent package (``sys.modules[name] = None``: ``import name`` raises ModuleNotFoundError), in a fresh
interpreter per command; a module of no extra keeps its traceback (a bug, not a missing extra)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.scripts.extras import missing_extra

REPO = Path(__file__).resolve().parents[2]


def run_without(module: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = f"import sys; sys.modules[{module!r}] = None\nfrom swebox.scripts.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    from tests.calc import calc_task

    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(calc_task().to_dict()) + "\n")
    return path


@pytest.mark.parametrize(
    ("module", "extra", "argv"),
    [
        ("flask", "view", ["view", "{run}"]),
        ("pyarrow", "skyrl", ["skyrl", "prepare", "--tasks", "{tasks}", "--out", "{out}", "--no-layer-check"]),
        ("torch", "train", ["train", "--config", str(REPO / "configs/grpo_tiny_cpu.yaml"), "total_steps=1"]),
        ("torch", "train", ["sft", "--config", str(REPO / "configs/grpo_tiny_cpu.yaml")]),
        ("torch", "train", ["eval", "--tasks", "{tasks}", "--policy", "gold"]),
        ("matplotlib", "train", ["plot", "{run}"]),
    ],
    ids=["view", "skyrl-prepare", "train", "sft", "eval-policy", "plot"],
)
def test_a_missing_extra_is_one_line_with_the_pip_command(tmp_path, tasks_file, module, extra, argv):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    argv = [a.format(run=run, tasks=tasks_file, out=tmp_path / "out") for a in argv]
    done = run_without(module, argv, tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[0] == (
        f"swebox {argv[0]}: needs the '{extra}' extra ({module} is not installed); install it: "
        f"pip install 'swebox[{extra}]'"
    )


def test_a_module_of_no_extra_is_not_taken_for_one():
    assert missing_extra(ModuleNotFoundError("No module named 'swebox.envs.nothing'", name="swebox.envs.nothing")) == ""
    assert missing_extra(ImportError("cannot import name 'x'")) == ""
    assert missing_extra(ModuleNotFoundError("x", name="flask.json")) == "view"
