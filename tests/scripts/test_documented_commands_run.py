"""Every command in the fenced shell blocks of the README and docs runs, not only parses.

Each fenced ``swebox ...``, ``make ...`` and ``scripts/*.sh`` line is classified by :data:`PLAN`:

- ``run``: the README's CPU path, executed as written in a fresh folder (``runs/...`` relative paths, the repo's
  ``configs/``), in the README's order, with only the budgets made small (``--max-tasks 3`` -> 1, a tiny model,
  one step): the e2e test runs them all and fails listing each command that exited non-zero, with its last line;
- ``help``: needs what a 2-core test cannot have (a GPU cluster, a 600-task corpus, another machine, a browser
  server that runs until Ctrl-C, the whole suite): its ``--help`` (``make -n`` for make targets) must succeed.

A fenced command that no entry classifies fails the fast test, so a new documented command cannot go untested.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.scripts.cli import main

from tests.scripts.test_documented_commands import _fences

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TINY_MODEL = [
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "model.intermediate_size=64",
    "logging.wandb=disabled",
    "logging.progress=false",
]

# (prefix of a documented command, "run" | "help", what a run adds or replaces). Order: the order runs happen in.
PLAN: list[tuple[str, str, dict]] = [
    (
        "swebox tasks synth --project toolz==1.2.0 --out runs/toolz",
        "run",
        {"replace": ("--max-tasks 3", "--max-tasks 1")},
    ),
    ("swebox tasks validate runs/toolz/tasks.jsonl --layers runs/toolz/layers", "run", {}),
    ("swebox cache --store runs/toolz/layers ls", "run", {}),
    (
        "swebox train --config configs/grpo_tiny_cpu.yaml env.tasks=runs/toolz/tasks.jsonl",
        "run",
        {
            "replace": ("total_steps=2", "total_steps=1"),
            "add": [
                *TINY_MODEL,
                "rollout.tasks_per_step=1",
                "rollout.group_size=2",
                "optim.micro_batch_size=2",
                "env.max_turns=2",
            ],
        },
    ),
    ("swebox plot runs/grpo_tiny_cpu", "run", {}),
    ("swebox eval --tasks runs/toolz/tasks.jsonl --policy gold --layers runs/toolz/layers --out", "run", {}),
    (
        "swebox eval --tasks runs/toolz/tasks.jsonl --policy gold --layers runs/toolz/layers --samples",
        "run",
        {"replace": ("--samples 4", "--samples 2")},
    ),
    (
        "swebox sft --config configs/grpo_tiny_cpu.yaml --data gold --tasks runs/toolz/tasks.jsonl",
        "run",
        {"add": TINY_MODEL},
    ),
    ("swebox eval --tasks runs/toolz/tasks.jsonl --layers runs/toolz/layers --policy gold --limit 2", "run", {}),
    ("swebox eval --predictions runs/eval/gold-preds.jsonl", "run", {}),
    # the rest: --help (or make -n)
    ("make ", "help", {}),
    ("scripts/", "help", {}),
    ("swebox view ", "help", {}),  # a server that runs until Ctrl-C (tests/scripts/test_view.py drives it)
    ("swebox bench ", "help", {}),  # docs/benchmarks.md: minutes to hours each, on an idle machine
    ("swebox demo", "help", {}),  # `make demo`'s job, run by the demo's own tests
    ("swebox tasks synth --recipe", "help", {}),
    ("swebox tasks synth (", "help", {}),
    ("swebox tasks synth --project", "help", {}),  # other flags than the README's run (docs/benchmarks.md)
    ("swebox tasks validate runs/corpus", "help", {}),
    ("swebox tasks validate tasks.jsonl", "help", {}),
    ("swebox tasks validate smith.parquet", "help", {}),
    ("swebox tasks harbor-import", "help", {}),
    ("swebox tasks export", "help", {}),
    ("swebox eval --predictions preds.jsonl", "help", {}),
    ("swebox eval --predictions gold.jsonl", "help", {}),
    ("swebox eval --verify", "help", {}),
    ("swebox eval --tasks runs/demo/corpus", "help", {}),
    ("swebox cache ", "help", {}),
    ("swebox train --config configs/grpo_tiny_cpu.yaml total_steps=20", "help", {}),  # needs `make demo`'s corpus
    ("swebox train --config configs/grpo_tiny_cpu.yaml --resume", "help", {}),
    ("swebox train --config configs/grpo_tiny_cpu.yaml model.init=pretrained", "help", {}),
    ("swebox train --config configs/grpo_tiny_cpu.yaml env.tasks=smith.parquet", "help", {}),
    ("swebox train --config configs/grpo_tiny_cpu.yaml ray.address=127.0.0.1", "help", {}),  # test_ray_train_loopback
    ("swebox train --config configs/grpo_qwen", "help", {}),  # GPU clusters
    ("swebox sft --config configs/grpo_tiny_cpu.yaml --data gold --tasks runs/demo", "help", {}),
    ("swebox sft --config configs/grpo_tiny_cpu.yaml --data runs/sft/eval.jsonl", "help", {}),
    ("swebox skyrl prepare", "help", {}),
    ("swebox tasks calibrate", "help", {}),
    ("swebox train --config CONFIG env.calibration", "help", {}),
    ("swebox eval --tasks tasks.jsonl --policy gold --calibration", "help", {}),
    ("swebox eval --tasks runs/toolz/tasks.jsonl --layers runs/toolz/layers --policy gold --harness", "help", {}),
    ("swebox doctor", "run", {}),
]


def documented() -> list[tuple[str, str]]:
    """(file, command) for every fenced swebox/make/scripts line, continuation lines joined, comments cut."""
    out = []
    for path in DOCS:
        shell, _ = _fences(path.read_text())
        for block in shell:
            block = re.sub(r"\\\n\s*", " ", block)
            block = re.sub(r"^(swebox .*)\n\s+(--.*)$", r"\1 \2", block, flags=re.M)
            for line in block.splitlines():
                line = re.sub(r"^\s*(\$ |[A-Z_]+=\S+ )+", "", line.strip())
                line = re.split(r"\s+#", line)[0].strip().rstrip("&").strip()
                if line.startswith(("swebox ", "make ", "scripts/")):
                    out.append((str(path.relative_to(REPO)), " ".join(line.split())))
    return out


def plan_of(command: str) -> tuple[str, str, dict] | None:
    # the longest prefix that matches: "swebox plot runs/grpo_tiny_cpu" (run) vs "... " (help, with more words)
    found = [p for p in PLAN if command.startswith(p[0]) or command == p[0].strip()]
    return max(found, key=lambda p: len(p[0])) if found else None


def test_every_documented_command_is_classified_and_its_help_runs():
    commands = documented()
    assert len(commands) >= 40, commands
    unclassified = [f"{where}: {c}" for where, c in commands if plan_of(c) is None]
    assert not unclassified, "documented commands that no PLAN entry runs:\n" + "\n".join(unclassified)
    checks: dict[tuple[str, ...], str] = {}  # argv -> the first command that needs it (each argv runs once)
    for where, command in sorted(set(commands)):
        words = shlex.split(command)
        if words[0] == "make":
            argv = ("make", "-n", "-C", str(REPO), *[w for w in words[1:] if "=" not in w][:1])
        elif words[0].startswith("scripts/"):
            argv = ("bash", str(REPO / words[0]), "--help")
        else:
            sub = [w for w in words[1:] if not w.startswith("-")][:2]
            sub = sub[:2] if sub[:1] in (["tasks"], ["bench"], ["skyrl"]) else sub[:1]
            if sub == ["cache"]:  # `swebox cache [--store DIR] VERB`: the verb comes after the options
                verbs = [w for w in words[2:] if w in ("build", "pull", "rm-image", "verify", "gc", "export", "import")]
                sub = ["cache", *verbs[:1]]
            argv = ("swebox", *sub, "--help")
        checks.setdefault(argv, f"{where}: `{command}`")
    failed = []
    for argv, command in checks.items():
        if argv[0] == "swebox":  # in this process: argparse prints the help and exits 0
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    main(list(argv[1:]))
                except SystemExit as exc:
                    code = exc.code or 0
                else:
                    code = 0
            problem = err.getvalue().strip().splitlines()[-1:]
        else:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
            code, problem = done.returncode, (done.stderr or done.stdout).strip().splitlines()[-1:]
        if code != 0:
            failed.append(f"{command} -> {' '.join(argv[-3:])}: exit {code}: {problem}")
    assert not failed, "\n".join(failed)


def runnable() -> list[str]:
    """The ``run`` commands, as the docs write them, with the plan's small budgets, in the plan's order."""
    by_plan: dict[str, str] = {}
    for _, command in documented():
        plan = plan_of(command)
        if plan is not None and plan[1] == "run" and plan[0] not in by_plan:
            prefix, _, change = plan
            if "replace" in change:
                old, new = change["replace"]
                assert old in command, f"`{command}`: expected {old!r} in it (the plan replaces it)"
                command = command.replace(old, new)
            by_plan[prefix] = " ".join([command, *change.get("add", [])])
    missing = [p for p, kind, _ in PLAN if kind == "run" and p not in by_plan]
    assert not missing, f"the docs no longer show: {missing}"
    return [by_plan[p] for p, kind, _ in PLAN if kind == "run"]


@pytest.mark.e2e
@pytest.mark.timeout(3600)
def test_the_readmes_cpu_path_runs_as_written(tmp_path):
    """Synthesis from PyPI, validation, the cache, GRPO, plots, eval (one episode, pass@k, SWE-bench export and
    scoring), SFT and the host check, each as the docs write it, in a fresh folder."""
    (tmp_path / "configs").symlink_to(REPO / "configs")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    failed = []
    for command in runnable():
        argv = [sys.executable, "-m", "swebox.scripts.cli", *shlex.split(command)[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, cwd=tmp_path, env=env)
        if done.returncode != 0:
            last = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()][-1:]
            failed.append(f"`{command}`: exit {done.returncode}: {last}")
            if "tasks synth" in command:
                break  # everything after it reads its tasks
    assert not failed, "documented commands that failed:\n" + "\n".join(failed)
    # what the chain made is real: a task, a run, a score of the exported predictions
    assert (tmp_path / "runs/toolz/tasks.jsonl").read_text().strip()
    assert (tmp_path / "runs/grpo_tiny_cpu/metrics.jsonl").read_text().strip()
    assert (tmp_path / "runs/eval/gold-report.json").is_file() and (tmp_path / "runs/sft/policy").is_dir()
