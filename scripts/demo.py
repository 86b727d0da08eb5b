"""``swebox demo``: the whole pipeline on a 2-core CPU machine in a few minutes, from nothing but PyPI.

1. corpus   synthesise real tasks from two PyPI projects (their sdists and test suites; envs/tasks/synth/pipeline.py),
            storing each project's env layer and each task's layer in ``OUT/corpus/layers``;
2. ray      start a local Ray whose node carries swebox's resources (``trainers/ray_pool.py``);
3. cache    materialise every layer on every swebox node under the node's I/O budget (``envs/cache/ray_budget.py``);
4. train    GRPO on the tiny random policy for a few steps, rollouts on Ray actors (``trainers/trainer.py``);
5. eval     one episode per task with the trained policy: resolved rate and where the time went;
6. report   ``OUT/metrics.jsonl``, the offline wandb run, PNG curves (``trainers/plot.py``), ``OUT/summary.md``.

A rerun reuses the corpus (synthesis resumes from ``tasks.jsonl``) and trains afresh. The settings are
``configs/demo.yaml`` (keys 1:1 with trainers/config.py) plus ``KEY=VALUE`` overrides on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# the repository's configs/ (an editable install), else the working directory's (run from a checkout)
REPO = Path(__file__).resolve().parents[1] if (Path(__file__).resolve().parents[1] / "configs").is_dir() else Path.cwd()
DEFAULT_CONFIG = REPO / "configs" / "demo.yaml"
DEFAULT_RECIPE = REPO / "configs" / "corpus" / "default.yaml"
DEFAULT_PROJECTS = ("toolz", "voluptuous")
"""Two corpus projects with sub-second suites, so that synthesis, grading and training all stay quick."""


class DemoError(RuntimeError):
    """A stage cannot run; the message says what was expected, what was found and how to fix it."""


class Stages:
    """Wall-clock seconds of each stage, printed as they finish."""

    def __init__(self, echo=print) -> None:
        self.seconds: dict[str, float] = {}
        self.echo = echo

    @contextlib.contextmanager
    def stage(self, name: str, what: str) -> Iterator[None]:
        self.echo(f"[demo] {name}: {what}")
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = time.monotonic() - started
            self.echo(f"[demo] {name}: {self.seconds[name]:.1f} s")


# ------------------------------------------------------------------------------------------------ stages


def select_projects(recipe_path: str | Path, names: Sequence[str]) -> list[Any]:
    """The corpus recipe's projects with these names (their test recipes included), in the order given."""
    from swebox.envs.tasks.synth.recipe import load_recipe

    recipes = {r.name: r for r in load_recipe(recipe_path)}
    missing = [n for n in names if n not in recipes]
    if missing:
        raise DemoError(f"--projects: expected names from {recipe_path}; found unknown {missing}; "
                        f"pick from {sorted(recipes)}")
    return [recipes[n] for n in names]


def build_corpus(recipes: Sequence[Any], out: Path, max_tasks: int, jobs: int,
                 echo=print) -> tuple[Path, dict[str, str]]:
    """Synthesise up to ``max_tasks`` validated tasks per project into ``out``; returns tasks.jsonl and the
    projects whose synthesis failed, with why."""
    from swebox.envs.tasks.synth.env import CacheEnvironments
    from swebox.envs.tasks.synth.pipeline import TASKS_FILE, SynthConfig, synthesize

    environments = CacheEnvironments(out)
    try:
        reports = synthesize(recipes, SynthConfig(out=str(out), max_tasks=max_tasks, jobs=jobs), environments)
    finally:
        environments.close()
    for r in reports:
        echo(f"[demo]   {r.label}: {r.tasks} new tasks from {r.tried} candidates in {r.seconds:.0f} s"
             + (f" (error: {r.error})" if r.error else ""))
    tasks = out / TASKS_FILE
    count = sum(1 for line in tasks.read_text().splitlines() if line.strip()) if tasks.exists() else 0
    if count == 0:
        errors = "; ".join(f"{r.label}: {r.error}" for r in reports if r.error) or "no candidate validated"
        raise DemoError(f"corpus: expected validated tasks in {tasks}; found none ({errors}); check that "
                        "PyPI is reachable (pip download) and that sandboxes work (swebox bench sandbox)")
    return tasks, {r.label: r.error for r in reports if r.error}


def project_counts(labels: Sequence[str], tasks: Sequence[Any], failed: dict[str, str]) -> list[dict]:
    """Per project: how many of the corpus's tasks (Task objects) are its own (ids start with its label) and why
    it failed."""
    return [{"label": label, "tasks": sum(t.instance_id.startswith(f"{label}.") for t in tasks),
             "error": failed.get(label, "")} for label in labels]


def demo_config(config_path: str | Path, out: Path, tasks_file: Path, overrides: Sequence[str]) -> Any:
    """configs/demo.yaml with the run folder and task file of this demo, then the user's overrides."""
    from swebox.trainers.config import load_config

    forced = [f"logging.run_dir={out}", f"env.tasks={tasks_file}"]
    return load_config(config_path, [*forced, *overrides])


def layer_keys(tasks: Sequence[Any]) -> list[str]:
    """Env and task layer keys of the tasks (Task objects), each once, env layers first."""
    envs = dict.fromkeys(t.env_key for t in tasks if t.env_key)
    own = dict.fromkeys(t.task_layer_key for t in tasks if t.task_layer_key)
    return [*envs, *own]


def cache_layers(store_root: Path, keys: Sequence[str], cache_root: str, nodes: Sequence[str]) -> dict[str, Any]:
    """Materialise ``keys`` on every node, each node under its own I/O budget; returns counts and seconds."""
    import ray
    from swebox.envs.cache import LayerCacheConfig, LayerStore
    from swebox.envs.cache.ray_budget import materialise_on_node

    store = LayerStore(store_root)
    started = time.monotonic()
    config = LayerCacheConfig(root=cache_root)
    refs = [ref for node in nodes for ref in materialise_on_node(store, list(keys), node, config)]
    done = ray.get(refs)
    return {"layers": len(keys), "nodes": len(nodes), "materialised": len(done),
            "bytes": sum(store.require(k).size for k in keys), "seconds": time.monotonic() - started}


def evaluate(pool: Any, tasks: Sequence[Any]) -> dict[str, float]:
    """One episode per task with the pool's current weights: resolved rate and per-episode time (means)."""
    from swebox.trainers.trainer import rollout_metrics

    started = time.monotonic()
    trajectories = pool.run_groups(list(tasks), 1)
    metrics = rollout_metrics(trajectories)
    keep = ("reward/mean", "reward/resolved_rate", "env/reset_s", "env/exec_s", "env/grade_s", "env/errors",
            "timing/generate_s", "timing/env_s", "timing/grade_s")
    out = {k: metrics[k] for k in keep if k in metrics}
    out.update({"episodes": float(len(trajectories)), "wall_s": time.monotonic() - started})
    return out


# ------------------------------------------------------------------------------------------------ the summary


def time_summary(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per training step of each part, and the environment's share of a step.

    env share = (timing/env_s + timing/grade_s) / timing/step_s: the part of a step's wall-clock time during
    which some episode was resetting, running a command or being graded (unions over concurrent episodes; the
    policy may be generating for another episode at the same time, so shares of parts can add up past 1).
    """
    steps = [r for r in records if isinstance(r.get("timing/step_s"), (int, float))]
    if not steps:
        return {}
    names = ("timing/step_s", "timing/rollout_s", "timing/generate_s", "timing/env_s", "timing/grade_s",
             "timing/update_s", "timing/sync_s", "env/reset_s", "env/exec_s", "env/grade_s")
    out = {}
    for name in names:
        values = [float(r[name]) for r in steps if isinstance(r.get(name), (int, float))]
        if values:
            out[name] = sum(values) / len(values)
    parts = sum(out.get(f"timing/{k}_s", 0.0) for k in ("generate", "env", "grade"))
    out["timing/rollout_other_s"] = max(0.0, out.get("timing/rollout_s", 0.0) - parts)
    step = out.get("timing/step_s", 0.0) or 1.0
    out["share/env"] = (out.get("timing/env_s", 0.0) + out.get("timing/grade_s", 0.0)) / step
    out["share/generate"] = out.get("timing/generate_s", 0.0) / step
    out["share/update"] = (out.get("timing/update_s", 0.0) + out.get("timing/sync_s", 0.0)) / step
    return out


def summary_markdown(summary: dict[str, Any]) -> str:
    """``summary.md``: the stages, the time of a training step by part, and the evaluation."""
    made = ", ".join(f"{p['label']} ({p['tasks']})" for p in summary["projects"] if p["tasks"]) or "no project"
    lines = ["# swebox demo", "", f"Tasks: {summary['tasks']} from {made}; {summary['steps']} GRPO steps on "
             f"{summary['nodes']} Ray node(s)."]
    for p in summary["projects"]:  # a project that gave nothing is said, never left out silently
        if not p["tasks"] or p["error"]:
            lines.append(f"**{p['label']}: {p['tasks']} tasks** ({p['error'] or 'no candidate validated'}).")
    lines += ["", "## Stages", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {sec:.1f} |" for name, sec in summary["stages"].items()]
    lines += [f"| **total** | **{sum(summary['stages'].values()):.1f}** |", "", "## A training step (mean)", "",
              "| part | seconds | share of the step |", "|---|---|---|"]
    step = summary["step"]
    total = step.get("timing/step_s", 0.0) or 1.0
    for name in ("timing/step_s", "timing/rollout_s", "timing/generate_s", "timing/env_s", "timing/grade_s",
                 "timing/rollout_other_s", "timing/update_s", "timing/sync_s"):
        if name in step:
            lines.append(f"| `{name}` | {step[name]:.2f} | {step[name] / total:.0%} |")
    lines += ["", "`timing/rollout_other_s` is the rollout's time outside generation, commands and grading: preparing "
              "each group's start state (task layer, setup, the fork of G sandboxes) and the calls to the Ray actors."]
    lines += ["", f"Environment share of a step (resets + commands + grading): **{step.get('share/env', 0):.0%}**; "
              f"generation {step.get('share/generate', 0):.0%}; update + weight sync "
              f"{step.get('share/update', 0):.0%}. Per episode: reset {step.get('env/reset_s', 0):.2f} s, "
              f"commands {step.get('env/exec_s', 0):.2f} s, grading {step.get('env/grade_s', 0):.2f} s.",
              "", "## Evaluation (one episode per task, trained policy)", ""]
    lines += [f"- `{k}`: {v:.3f}" for k, v in summary["eval"].items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ the command


def run_demo(args: argparse.Namespace, echo=print) -> dict[str, Any]:
    """All stages; returns the summary (also written to OUT/summary.json and OUT/summary.md)."""
    from swebox.trainers.plot import plot_run
    from swebox.trainers.ray_pool import RayWorkerPool, init_ray, swebox_nodes
    from swebox.trainers.tracking import read_metrics
    from swebox.trainers.trainer import Trainer, load_tasks

    out = Path(args.out).absolute()
    corpus = out / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    stages = Stages(echo)
    recipes = select_projects(args.recipe, args.projects)
    with stages.stage("corpus", f"tasks from {', '.join(r.label for r in recipes)} (<= {args.max_tasks} each)"):
        tasks_file, failed = build_corpus(recipes, corpus, args.max_tasks, args.jobs, echo)
    cfg = demo_config(args.config, out, tasks_file, args.overrides)
    tasks = load_tasks(str(tasks_file))
    store_root = corpus / "layers"
    # rollout actors find the layers through these (envs/layers_resolver.py); set before Ray starts its workers
    previous_store = os.environ.get("SWEBOX_LAYER_STORE")
    os.environ["SWEBOX_LAYER_STORE"] = str(store_root)
    owns_ray = False
    pool = None
    try:
        with stages.stage("ray", "local Ray with swebox's node resources"):
            owns_ray = init_ray(cfg)
            nodes = swebox_nodes(cfg.ray.node_resource)
        with stages.stage("cache", f"layers of {len(tasks)} tasks on {len(nodes)} node(s)"):
            cached = cache_layers(store_root, layer_keys(tasks), cfg.env.cache_dir, nodes)
        with stages.stage("train", f"{cfg.total_steps} GRPO steps x {cfg.rollout.tasks_per_step} tasks x "
                                   f"{cfg.rollout.group_size} rollouts"):
            pool = RayWorkerPool(cfg)
            trainer = Trainer(cfg, pool=pool, tasks=tasks, echo=echo)
            trainer.train()
        with stages.stage("eval", f"trained policy, one episode on each of {len(tasks)} tasks"):
            evaluation = evaluate(pool, tasks)
    finally:
        if pool is not None:
            pool.close()
        if owns_ray:
            import ray

            ray.shutdown()
        # the caller's environment as it was (a later job in this process must not train on the demo's store)
        if previous_store is None:
            os.environ.pop("SWEBOX_LAYER_STORE", None)
        else:
            os.environ["SWEBOX_LAYER_STORE"] = previous_store
    with stages.stage("plots", "PNG curves"):
        plots = plot_run(out)
    records = read_metrics(out)
    summary = {
        "projects": project_counts([r.label for r in recipes], tasks, failed), "tasks": len(tasks),
        "steps": len(records), "nodes": len(nodes),
        "cache": cached, "stages": stages.seconds, "step": time_summary(records), "eval": evaluation,
        "files": {"metrics": str(out / "metrics.jsonl"), "plots": [str(p) for p in plots],
                  "wandb": str(out / "wandb"), "policy": str(out / "policy"), "tasks": str(tasks_file),
                  "layers": str(store_root)},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    return summary


def print_locations(summary: dict[str, Any], out: Path, echo=print) -> None:
    files = summary["files"]
    step = summary["step"]
    echo("")
    echo(f"swebox demo finished in {sum(summary['stages'].values()):.0f} s. Where everything is:")
    echo(f"  tasks        {files['tasks']}  ({summary['tasks']} tasks; layers in {files['layers']})")
    for p in summary["projects"]:
        if not p["tasks"] or p["error"]:
            echo(f"  WARNING      {p['label']}: {p['tasks']} tasks ({p['error'] or 'no candidate validated'})")
    echo(f"  metrics      {files['metrics']}")
    echo(f"  wandb        {files['wandb']}  (offline; upload with `wandb sync {files['wandb']}/offline-run-*`)")
    echo(f"  plots        {', '.join(files['plots'])}")
    echo(f"  policy       {files['policy']}")
    echo(f"  summary      {out / 'summary.md'}")
    if step:
        echo(f"  a step took {step.get('timing/step_s', 0):.1f} s: env (resets, commands, grading) "
             f"{step.get('share/env', 0):.0%}, generation {step.get('share/generate', 0):.0%}, "
             f"update + sync {step.get('share/update', 0):.0%}")
    ev = summary["eval"]
    echo(f"  eval         resolved {ev.get('reward/resolved_rate', 0):.0%} of {int(ev.get('episodes', 0))} "
         "episodes (a tiny random policy after a few steps: the point is the pipeline, not the score)")


def add_arguments(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``swebox demo``."""
    p = subparsers.add_parser("demo", help="the whole pipeline in minutes: tasks, cache, Ray, GRPO, eval, plots",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="training config (default: configs/demo.yaml)")
    p.add_argument("--recipe", default=str(DEFAULT_RECIPE), help="corpus recipe the projects come from")
    p.add_argument("--projects", nargs="+", default=list(DEFAULT_PROJECTS), help="project names in the recipe")
    p.add_argument("--max-tasks", type=int, default=3, help="validated tasks per project (default: 3)")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="synthesis sandboxes")
    p.add_argument("overrides", nargs="*", help="config overrides KEY=VALUE, e.g. total_steps=2")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a local Ray listens on 127.0.0.1 only
    try:
        if args.max_tasks < 1:
            raise DemoError(f"--max-tasks: expected >= 1; found {args.max_tasks}; use 3")
        summary = run_demo(args)
    except DemoError as exc:
        print(f"swebox demo: {exc}", file=sys.stderr)
        return 1
    print_locations(summary, Path(args.out).absolute())
    return 0
