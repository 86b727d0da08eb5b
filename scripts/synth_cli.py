"""``swebox tasks synth``: synthesise validated tasks from real projects (see envs/tasks/synth/pipeline.py).

    swebox tasks synth (--project toolz==1.2.0 | --project npm:minimist@1.2.8 | --repo /path/to/git
                        | --recipe configs/corpus/default.yaml) --out DIR [--max-tasks N] [--jobs N]
                       [--seed N] [--tests PATH ...] [--max-candidates N]

``add_arguments(subparsers)`` adds the ``synth`` sub-command to the ``tasks`` command's sub-parsers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def add_arguments(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``synth`` under the given sub-parsers; the handler is ``args.func(args) -> exit code``."""
    p = subparsers.add_parser(
        "synth",
        help="synthesise validated SWE tasks from real Python projects",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--project",
        help="a pinned PyPI requirement, e.g. toolz==1.2.0 (its sdist must ship tests), or an npm package, "
        "e.g. npm:minimist@1.2.8 (its tarball must ship a test folder; run with node --test)",
    )
    source.add_argument("--repo", help="a local git repository (its HEAD is the snapshot)")
    source.add_argument("--recipe", help="a corpus recipe YAML, e.g. configs/corpus/default.yaml")
    p.add_argument("--out", required=True, help="output folder: tasks.jsonl, rejected.jsonl, layers/")
    p.add_argument("--max-tasks", type=int, default=None, help="validated tasks per project (default: recipe's)")
    p.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1), help="sandboxes testing at once")
    p.add_argument("--seed", type=int, default=0, help="seed of the candidate order")
    p.add_argument(
        "--tests",
        nargs="+",
        default=None,
        help="test paths for --project/--repo (default: pytest's testpaths, else the tests/ or test/ folders)",
    )
    p.add_argument("--pytest-args", default="", help="extra pytest options for --project/--repo (one string)")
    p.add_argument("--max-candidates", type=int, default=0, help="candidates tried per project at most (0: no cap)")
    p.set_defaults(func=run)
    return p


def recipes_from_args(args: argparse.Namespace) -> list:
    """The projects the command line names."""
    import shlex

    from swebox.envs.tasks.synth.recipe import (
        load_recipe,
        project_from_npm,
        project_from_repo,
        project_from_requirement,
    )

    if args.recipe:
        return load_recipe(args.recipe)
    overrides: dict = {}
    if args.tests:
        overrides["tests"] = tuple(args.tests)
    if args.pytest_args:
        overrides["pytest_args"] = tuple(shlex.split(args.pytest_args))
    if args.project and args.project.startswith("npm:"):
        return [project_from_npm(args.project, **overrides)]
    if args.project:
        return [project_from_requirement(args.project, **overrides)]
    return [project_from_repo(args.repo, **overrides)]


def run(args: argparse.Namespace) -> int:
    """Run synthesis; prints one summary line per project and a JSON summary; exit 1 if any project failed."""
    from swebox.envs.tasks.synth.env import CacheEnvironments
    from swebox.envs.tasks.synth.journal import Journal
    from swebox.envs.tasks.synth.pipeline import SynthConfig, synthesize
    from tqdm import tqdm

    recipes = recipes_from_args(args)
    config = SynthConfig(
        out=args.out,
        max_tasks=args.max_tasks,
        jobs=args.jobs,
        seed=args.seed,
        max_candidates=args.max_candidates,
    )
    wanted = {r.label: args.max_tasks if args.max_tasks is not None else r.max_tasks for r in recipes}
    journal = Journal(Path(args.out))  # a resumed run's bar starts at the tasks already made
    done = sum(min(journal.count(label), n) for label, n in wanted.items())
    environments = CacheEnvironments(args.out)
    started = time.monotonic()
    with tqdm(total=sum(wanted.values()), initial=done, desc="tasks", unit="task", file=sys.stderr) as bar:

        def progress(label: str, n: int) -> None:
            bar.set_postfix_str(label)
            bar.update(n)

        try:
            reports = synthesize(recipes, config, environments, progress)
        finally:
            environments.close()
    minutes = (time.monotonic() - started) / 60
    made = sum(r.tasks for r in reports)
    for r in reports:
        status = f"error: {r.error}" if r.error else "ok"
        print(
            f"{r.label}: {r.tasks} tasks from {r.tried} candidates in {r.seconds:.0f} s "
            f"({r.stable_tests} stable tests; rejected {r.rejected}) {status}"
        )
    summary = {
        "tasks": made,
        "minutes": round(minutes, 2),
        "tasks_per_minute": round(made / minutes, 2) if minutes > 0 else 0.0,
        "failed_projects": [r.label for r in reports if r.error],
    }
    print(json.dumps(summary))
    return 1 if summary["failed_projects"] else 0
