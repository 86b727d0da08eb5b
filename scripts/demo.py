"""``swebox demo``: the whole pipeline on a 2-core CPU machine in a few minutes, from nothing but PyPI.

1. corpus   synthesise real tasks from two PyPI projects (their sdists and test suites; envs/tasks/synth/pipeline.py),
            storing each project's env layer and each task's layer in ``OUT/corpus/layers``;
2. ray      start a local Ray whose node carries swebox's resources (``trainers/distributed/ray_pool.py``);
3. cache    materialise every layer on every swebox node under the node's I/O budget (``envs/cache/ray_budget.py``);
4. sft      a short warm start of the tiny random policy: supervised fine-tuning on expert episodes of the
            training tasks (their gold patches played in sandboxes and graded;
            ``trainers/finetune/sft.py``), in ``OUT/sft``;
5. train    GRPO from that policy on the training tasks, rollouts on Ray actors (``trainers/rl/trainer.py``);
6. eval     one episode per task with the trained policy, on the training tasks and on held-out tasks (the last
            task of each project, never trained on): resolved rates and where the time went;
7. report   ``OUT/metrics.jsonl``, the offline wandb run, PNG curves (``trainers/run/plot.py``), ``OUT/summary.md``.

What it is meant to show: GRPO raising reward/mean on the training tasks from a partly right warm start, every
reward a real grading in a sandbox; and that a tiny model does not generalise to the held-out tasks. summary.md
says from the run's own numbers whether the reward rose (it does with configs/demo.yaml: docs/training.md).

A rerun reuses the corpus (synthesis resumes from ``tasks.jsonl``) and trains afresh. The settings are
``configs/demo.yaml`` (keys 1:1 with trainers/run/config.py) plus ``KEY=VALUE`` overrides on the command line.
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

from swebox.scripts.demo_summary import learning, shows, summary_markdown, time_summary

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
        raise DemoError(
            f"--projects: expected names from {recipe_path}; found unknown {missing}; pick from {sorted(recipes)}"
        )
    return [recipes[n] for n in names]


def build_corpus(
    recipes: Sequence[Any], out: Path, max_tasks: int, jobs: int, echo=print
) -> tuple[Path, dict[str, str]]:
    """Synthesise up to ``max_tasks`` validated tasks per project into ``out``; returns tasks.jsonl and the
    projects whose synthesis failed, with why."""
    from swebox.envs.tasks.synth.env import CacheEnvironments
    from swebox.envs.tasks.synth.journal import TASKS_FILE
    from swebox.envs.tasks.synth.pipeline import SynthConfig, synthesize

    environments = CacheEnvironments(out)
    try:
        reports = synthesize(recipes, SynthConfig(out=str(out), max_tasks=max_tasks, jobs=jobs), environments)
    finally:
        environments.close()
    for r in reports:
        echo(
            f"[demo]   {r.label}: {r.tasks} new tasks from {r.tried} candidates in {r.seconds:.0f} s"
            + (f" (error: {r.error})" if r.error else "")
        )
    tasks = out / TASKS_FILE
    count = sum(1 for line in tasks.read_text().splitlines() if line.strip()) if tasks.exists() else 0
    if count == 0:
        errors = "; ".join(f"{r.label}: {r.error}" for r in reports if r.error) or "no candidate validated"
        raise DemoError(
            f"corpus: expected validated tasks in {tasks}; found none ({errors}); check that "
            "PyPI is reachable (pip download) and that sandboxes work (swebox bench sandbox)"
        )
    return tasks, {r.label: r.error for r in reports if r.error}


def project_counts(labels: Sequence[str], tasks: Sequence[Any], failed: dict[str, str]) -> list[dict]:
    """Per project: how many of the corpus's tasks (Task objects) are its own (ids start with its label) and why
    it failed."""
    return [
        {
            "label": label,
            "tasks": sum(t.instance_id.startswith(f"{label}.") for t in tasks),
            "error": failed.get(label, ""),
        }
        for label in labels
    ]


def demo_config(config_path: str | Path, out: Path, tasks_file: Path, overrides: Sequence[str]) -> Any:
    """configs/demo.yaml with the run folder and task file of this demo, then the user's overrides."""
    import dataclasses
    import secrets

    from swebox.trainers.run.config import load_config

    forced = [f"logging.run_dir={out}", f"env.tasks={tasks_file}"]
    cfg = load_config(config_path, [*forced, *overrides])
    if cfg.logging.group:
        return cfg
    # the SFT, GRPO and eval runs of this demo side by side in wandb (a rerun is a new group)
    group = f"demo-{out.name}-{secrets.token_hex(3)}"
    return dataclasses.replace(cfg, logging=dataclasses.replace(cfg.logging, group=group))


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
    return {
        "layers": len(keys),
        "nodes": len(nodes),
        "materialised": len(done),
        "bytes": sum(store.require(k).size for k in keys),
        "seconds": time.monotonic() - started,
    }


def split_tasks(tasks: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(training, held-out) Task objects: the last task of each repository that has two or more is held out."""
    by_repo: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_repo.setdefault(task.repo, []).append(i)
    held = {ids[-1] for ids in by_repo.values() if len(ids) >= 2}
    return [t for i, t in enumerate(tasks) if i not in held], [t for i, t in enumerate(tasks) if i in held]


def sft_config(cfg: Any, out: Path) -> Any:
    """The warm start's config: the demo's, with its own run folder ``OUT/sft``."""
    import dataclasses

    return dataclasses.replace(cfg, logging=dataclasses.replace(cfg.logging, run_dir=str(out / "sft")))


def from_policy(cfg: Any, policy: Path, checkpoint: Path | None = None) -> Any:
    """The demo's GRPO config, starting from the fine-tuned policy folder (weights and tokenizer) and, given its
    checkpoint, the warm start's optimizer moments (``optim.moments_from``)."""
    import dataclasses

    optim = dataclasses.replace(cfg.optim, moments_from=str(checkpoint)) if checkpoint else cfg.optim
    return dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, init="pretrained", path=str(policy), tokenizer=""), optim=optim
    )


def evaluate(pool: Any, tasks: Sequence[Any]) -> dict[str, float]:
    """One episode per task with the pool's current weights: resolved rate and per-episode time (means)."""
    from swebox.trainers.rl.step_metrics import rollout_metrics

    if not tasks:
        return {"episodes": 0.0}
    started = time.monotonic()
    trajectories = pool.run_groups(list(tasks), 1)
    metrics = rollout_metrics(trajectories)
    keep = (
        "reward/mean",
        "reward/resolved_rate",
        "env/reset_s",
        "env/exec_s",
        "env/grade_s",
        "env/errors",
        "timing/generate_s",
        "timing/env_s",
        "timing/grade_s",
    )
    out = {k: metrics[k] for k in keep if k in metrics}
    out.update({"episodes": float(len(trajectories)), "wall_s": time.monotonic() - started})
    return out


def log_evaluation(cfg: Any, run_dir: Path, evaluation: dict[str, dict[str, float]], echo=print) -> None:
    """The evaluation as ``eval/<split>/<metric>`` in ``run_dir/metrics.jsonl`` and in a wandb run of the demo's
    group (job type ``eval``), next to its SFT and GRPO runs."""
    from swebox.trainers.run.tracking import Tracker

    values = {f"eval/{split}/{k.replace('/', '_')}": v for split, m in evaluation.items() for k, v in m.items()}
    with Tracker.for_run(
        cfg.logging,
        run_dir,
        {"split": sorted(evaluation)},
        "eval",
        run_name=f"{Path(cfg.logging.run_dir).name}-eval",
        echo=echo,
    ) as tracker:
        tracker.log(cfg.total_steps, values)


# ------------------------------------------------------------------------------------------------ the command


def run_demo(args: argparse.Namespace, echo=print) -> dict[str, Any]:
    """All stages; returns the summary (also written to OUT/summary.json and OUT/summary.md)."""
    from swebox.trainers.distributed.ray_cluster import init_ray, swebox_nodes
    from swebox.trainers.distributed.ray_pool import RayWorkerPool
    from swebox.trainers.finetune.sft import run_sft
    from swebox.trainers.rl.task_order import load_tasks
    from swebox.trainers.rl.trainer import Trainer
    from swebox.trainers.run.plot import plot_run
    from swebox.trainers.run.tracking import read_metrics

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
    # rollout actors find the layers through these (envs/episodes/layers_resolver.py); set before Ray starts its workers
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
        train_tasks, held_out = split_tasks(tasks)
        with stages.stage("sft", f"warm start on expert episodes of {len(train_tasks)} training tasks"):
            warm = run_sft(sft_config(cfg, out), tasks=train_tasks, echo=echo)
        # GRPO trains what the warm start trained on; a task whose expert episode was left out (longer than the
        # context, say) was never trained on, so it is evaluated with the held-out ones
        # likewise a task whose expert turn is longer than generation.max_new_tokens: the policy cannot sample it
        trained = set(warm.task_ids) - set(warm.long_turn_ids)
        held_out += [t for t in train_tasks if t.instance_id not in trained]
        train_tasks = [t for t in train_tasks if t.instance_id in trained]
        cfg = from_policy(cfg, warm.policy, warm.checkpoint)
        with stages.stage(
            "train",
            f"{cfg.total_steps} GRPO steps x {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} rollouts",
        ):
            pool = RayWorkerPool(cfg)
            trainer = Trainer(cfg, pool=pool, tasks=train_tasks, echo=echo)
            trainer.train()
        with stages.stage("eval", f"trained policy, one episode on each of {len(tasks)} tasks"):
            evaluation = {"train": evaluate(pool, train_tasks), "held_out": evaluate(pool, held_out)}
            log_evaluation(cfg, out / "eval", evaluation, echo)
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
        "projects": project_counts([r.label for r in recipes], tasks, failed),
        "tasks": len(tasks),
        "train_tasks": len(train_tasks),
        "held_out_tasks": len(held_out),
        "sft": {
            "steps": len(warm.records),
            "kept": warm.report.kept,
            "data": str(warm.report),
            "sequence_prob": warm.records[-1]["sft/sequence_prob"] if warm.records else 0.0,
        },
        "steps": len(records),
        "nodes": len(nodes),
        "learning": learning(records),
        "cache": cached,
        "stages": stages.seconds,
        "step": time_summary(records),
        "eval": evaluation,
        "files": {
            "metrics": str(out / "metrics.jsonl"),
            "plots": [str(p) for p in plots],
            "wandb": str(out / "wandb"),
            "policy": str(out / "policy"),
            "tasks": str(tasks_file),
            "layers": str(store_root),
            "sft": str(out / "sft"),
        },
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
        echo(
            f"  a step took {step.get('timing/step_s', 0):.1f} s: env (resets, commands, grading) "
            f"{step.get('share/env', 0):.0%}, generation {step.get('share/generate', 0):.0%}, "
            f"update + sync {step.get('share/update', 0):.0%}"
        )
    echo(
        f"  sft          {files['sft']}  (warm start: {summary['sft']['steps']} steps on {summary['sft']['kept']} "
        "expert episodes)"
    )
    for line in shows(summary):
        echo("  " + line)


def add_arguments(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``swebox demo``."""
    p = subparsers.add_parser(
        "demo",
        help="the whole pipeline in minutes: tasks, cache, Ray, GRPO, eval, plots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
