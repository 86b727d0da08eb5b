"""``swebox eval --tasks tasks.jsonl --policy POLICY``: one episode per task (or a search, scripts/eval_cli.py's
options), graded, with the per-task table, the summary, ``--out`` records, ``--predictions-out`` and the exit
status. The policies it plays are in scripts/eval_policies.py; the parser is registered by scripts/train_cli.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from swebox.scripts.eval_policies import (
    check_hf_folder,
    check_policy,
    harness_lines,
    hf_text_policy,
    play_text_episode,
    text_policy,
)
from swebox.trainers.evaluation.eval_report import log_eval_to_wandb, print_task_table, report_path, summary, task_table


def run_eval(args: argparse.Namespace) -> int:
    from swebox.scripts.eval_cli import run_scoring, search_options

    if args.predictions or args.verify:  # score given patches (SWE-bench's harness) or recorded diffs
        return run_scoring(args)
    from swebox.envs.cache.durable import write_atomic
    from swebox.envs.episodes.groups import group
    from swebox.envs.episodes.layers_resolver import LayerSource
    from swebox.envs.tasks import load
    from swebox.envs.tasks.selection import select
    from swebox.envs.tasks.validate import layers_flag_error
    from swebox.trainers.evaluation import eval_search
    from swebox.trainers.policy.sampling import sample_seed
    from swebox.trainers.rl.rollout import play_episode
    from swebox.trainers.run.config import ConfigError, load_config

    check_policy(args.policy)
    search = search_options(args)
    if args.policy.startswith("hf:"):  # the flags first, then the tasks and their layers
        check_hf_folder(args.policy[3:])
    if args.predictions_out and eval_search.wanted(search):  # a search gives several diffs per task, not one
        raise SystemExit(
            "--predictions-out: expected one episode per task; found --samples/--best-of/--search. "
            "Export without them (with --out, a rerun plays nothing again)"
        )
    if args.wandb != "disabled" and not args.out:
        raise SystemExit("--wandb: expected --out FILE as well (the wandb run goes next to it); found no --out")
    overrides = [
        *args.overrides,
        *(
            f"env.{key}={value}"
            for key, value in (("harness", args.harness), ("harness_install", args.harness_install))
            if value
        ),
    ]
    cfg = load_config(args.config, overrides)
    tasks = select(list(load(args.tasks)), args.instance_ids, args.limit, args.tasks)
    if not tasks:
        raise ConfigError(f"--tasks {args.tasks}: expected at least one task; found an empty task set")
    calibration = args.calibration or cfg.env.calibration
    order = args.calibration_order or cfg.env.calibration_order
    if order != "none" and not calibration:
        raise ConfigError(
            f"--calibration-order {order}: expected a --calibration FILE to order by; found none; run "
            "`swebox tasks calibrate --policy ...` first"
        )
    if calibration:
        from swebox.envs.tasks.calibrate_select import CalibrationError, apply_calibration

        try:  # the tasks are then submitted, and the report's rows written, in this order
            tasks = apply_calibration(tasks, calibration, order=order)
        except CalibrationError as exc:
            raise ConfigError(str(exc)) from None
    if args.layers and layers_flag_error(args.layers):
        raise ConfigError(layers_flag_error(args.layers))
    plain = bool(args.layers) and not (Path(args.layers) / "manifests").is_dir()
    source = LayerSource(
        store="" if plain else args.layers,
        dirs=args.layers if plain else "",
        cache_root=cfg.env.cache_dir,
        tasks_file=args.tasks,
    )
    refuse_missing_layers(tasks, source)
    econf = cfg.env.episode()
    if args.policy.startswith("hf:"):
        cfg = dataclasses.replace(
            cfg, model=dataclasses.replace(cfg.model, init="pretrained", path=args.policy[3:], tokenizer="")
        )
        from swebox.trainers.policy.generation import make_backend
        from swebox.trainers.policy.models import build_model, build_tokenizer

        tokenizer = build_tokenizer(cfg.model)
        backend = make_backend(cfg.generation, build_model(cfg.model, tokenizer).eval(), tokenizer)
    else:
        replies_for = text_policy(args, cfg)
        backend = tokenizer = None
        if cfg.env.harness:  # scripted and served replies get the policy's ids too: the records feed swebox sft
            from swebox.trainers.policy.models import build_tokenizer

            tokenizer = build_tokenizer(cfg.model)
    from swebox.trainers.evaluation.eval_records import EvalOut, RecordsError, run_tasks
    from swebox.trainers.rl.harness_rollout import harness_model, play_harness_episode

    try:
        out = EvalOut.open(args.out, args.policy + eval_search.label(search)) if args.out else None
    except RecordsError as exc:
        raise SystemExit(f"swebox eval: {exc}") from None
    todo = out.todo(tasks) if out is not None else tasks
    if out is not None and out.previous:
        done = len(tasks) - len(todo)
        print(
            f"resuming: {done} of {len(tasks)} tasks already recorded in {args.out}; playing the other "
            f"{len(todo)} (delete {args.out} to start over)"
        )

    if eval_search.wanted(search):
        # with env.harness every line is an agent program's run; beam forks it by replay (docs/envs.md)
        harness_for = harness_lines(args, cfg, backend, tokenizer) if cfg.env.harness else None
        if not cfg.env.harness and args.policy.startswith("hf:"):
            replies_for = hf_text_policy(backend, tokenizer, cfg)
        searched = eval_search.run(search, tasks, replies_for, source, econf, out=out, harness_for=harness_for)
        broken = [r.task_id for r in searched if any(b.startswith("error: ") for b in r.budgets_hit)]
        if broken:  # a task whose search crashed counts as unresolved in the report; the exit status says so
            print(
                f"swebox eval: {len(broken)} of {len(searched)} tasks could not be searched (e.g. {broken[0]}); "
                "the report counts them unresolved",
                file=sys.stderr,
            )
            return 1
        return 0

    def one(task) -> dict[str, Any]:
        started = time.monotonic()
        try:
            with group(task, 1, source=source, config=econf) as g:
                if cfg.env.harness:
                    traj = play_harness_episode(
                        g[0],
                        harness_model(args, cfg, task, backend, tokenizer),
                        tokenizer,
                        cfg.env.harness_config(),
                        task.instance_id,
                        task.instance_id,
                        seed=sample_seed(cfg.seed, "eval", task.instance_id),
                    )
                    rec = trajectory_record(traj, ids=bool(traj.response_ids))
                elif args.policy.startswith("hf:"):
                    # its own sampling stream: the tasks play in parallel threads, in any order
                    traj = play_episode(
                        g[0],
                        backend,
                        tokenizer,
                        cfg,
                        task.instance_id,
                        task.instance_id,
                        seed=sample_seed(cfg.seed, "eval", task.instance_id),
                    )
                    rec = trajectory_record(traj, ids=True)
                else:
                    rec = play_text_episode(g[0], replies_for(task), cfg.env.max_turns)
        except Exception as exc:  # one broken task must not end the evaluation
            rec = {
                "reward": 0.0,
                "resolved": False,
                "error": f"{type(exc).__name__}: {exc}",
                "model_s": 0.0,
                "env_s": 0.0,
                "metrics": {"env/errors": 1.0},
                "task_id": task.instance_id,
                "failed": True,
                "truncated": False,
                "num_turns": 0,
                "reason": "error",
                "prompt": [],
                "turns": [],
                "diff": "",
                "grade": None,
            }
        rec.update(instance_id=task.instance_id, total_s=time.monotonic() - started)
        return rec

    new = run_tasks(todo, one, parallel=args.parallel, out=out, total=len(tasks), desc=f"eval {args.policy}")
    previous = out.previous if out is not None else {}
    results = [new[t.instance_id] if t.instance_id in new else previous[t.instance_id] for t in tasks]
    table = task_table(results)
    print_task_table(results)
    print(summary(results, args.policy))
    if out is not None:
        report = report_path(args.out)
        try:
            out.finish(new, [t.instance_id for t in tasks])
            write_atomic(
                report,
                f"# swebox eval: {args.policy}\n\ntasks: `{args.tasks}`\n\n{table}\n\n"
                + summary(results, args.policy).replace("\n", "\n\n")
                + "\n",
            )
        except RecordsError as exc:
            raise SystemExit(f"swebox eval: {exc}") from None
        except OSError as exc:  # the table only: every record is in --out already
            raise SystemExit(
                f"swebox eval: {report}: cannot write the table ({exc.strerror or exc}); the "
                f"records are whole in {args.out}"
            ) from None
        print(f"results: {args.out} (one JSON record per task; swebox view {args.out}); table: {report}")
        if args.wandb != "disabled":
            log_eval_to_wandb(
                results, out=args.out, tasks=args.tasks, policy=args.policy, mode=args.wandb, group=args.wandb_group
            )
    return finish_eval(args, results)


def trajectory_record(traj: Any, *, ids: bool) -> dict[str, Any]:
    """The eval record of a played episode (a harness run's or an hf policy's ``Trajectory``): its episode
    fields and timings, and with ``ids`` its token ids and loss mask (what swebox sft trains on)."""
    from swebox.trainers.run.trajectories import episode_fields

    m = traj.metrics
    rec = {**episode_fields(traj), "model_s": m.get("timing/generate_s", 0.0), "env_s": m.get("timing/env_s", 0.0)}
    if ids:
        rec.update(prompt_ids=traj.prompt_ids, response_ids=traj.response_ids, loss_mask=traj.loss_mask)
    return rec


def refuse_missing_layers(tasks: list[Any], source: Any) -> None:
    """Every task's layers are in ``--layers`` before any episode plays, or one line says how many are not and
    how to make the first (an error row per task after the whole run told the user too late)."""
    from swebox.envs.episodes.layers_resolver import LayersMissing, missing_layers

    missing = [why for why in (missing_layers(t, source) for t in tasks) if why is not None]
    if missing:
        raise LayersMissing(f"--layers: {len(missing)} of {len(tasks)} tasks cannot start: {missing[0]}")


def finish_eval(args: argparse.Namespace, results: list[dict[str, Any]]) -> int:
    """Write ``--predictions-out``; the exit status: 1 when a task could not be played (its record holds the
    error; a task played and not resolved is a result, not an error), else 0."""
    from swebox.trainers.evaluation.eval_records import RecordsError, write_predictions

    if args.predictions_out:
        try:
            n = write_predictions(args.predictions_out, results, args.model or args.policy)
        except RecordsError as exc:
            raise SystemExit(f"swebox eval: {exc}") from None
        print(
            f"predictions: {args.predictions_out} ({n} of {len(results)} tasks; score them with swebox eval "
            f"--predictions {args.predictions_out} --tasks {args.tasks})"
        )
    failed = [r["instance_id"] for r in results if r.get("error")]
    if failed:
        first = next(r for r in results if r.get("error"))
        print(
            f"swebox eval: {len(failed)} of {len(results)} tasks could not be played (e.g. {first['instance_id']}: "
            f"{str(first['error']).splitlines()[0][:200]}); their records hold the errors",
            file=sys.stderr,
        )
        return 1
    return 0
