"""``swebox train``, ``swebox sft`` and ``swebox eval``: GRPO, fine-tuning on trajectories, a policy's resolved rate.

``swebox train --config configs/grpo_tiny_cpu.yaml [--resume] [--ray] [key=value ...]`` runs the trainer
(trainers/rl/trainer.py) with dotted overrides (trainers/run/config.py).

``swebox sft --config CONFIG --data gold|RECORDS.jsonl [key=value ...]`` fine-tunes the policy on expert
episodes of the tasks' gold patches or on the resolved episodes of ``swebox eval --out`` records
(trainers/finetune/sft.py).

``swebox eval --tasks tasks.jsonl --policy POLICY`` plays one episode per task and grades it, printing the
resolved rate and where the time went (environment reset, model, commands, grading). Policies:

- ``gold``: applies the task's own fix and submits (a resolved rate below 1 means broken tasks or env);
- ``empty``: submits at once (above 0 means tasks that are already solved);
- ``hf:PATH``: a local transformers model folder (e.g. a run's ``policy/``), token in / token out;
- ``openai:URL``: an OpenAI-compatible server (``--model NAME``), through chat messages.

This module registers the three commands and runs ``train`` and ``sft``; ``eval`` runs in scripts/eval_play.py
and the policies it plays are in scripts/eval_policies.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# `swebox eval` lives in eval_play.py (the command) and eval_policies.py (the policies it plays); re-exported:
# tests import them from here
from swebox.scripts.eval_play import finish_eval, refuse_missing_layers, run_eval  # noqa: F401
from swebox.scripts.eval_policies import gold_replies, play_text_episode  # noqa: F401
from swebox.trainers.evaluation.eval_report import (  # noqa: F401  (re-exported: tests and scripts import them from here)
    TABLE_COLUMNS,
    log_eval_to_wandb,
    print_task_table,
    report_path,
    summary,
    task_table,
)
from swebox.trainers.run.config import CALIBRATION_ORDERS


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    """Register ``swebox train``, ``swebox sft`` and ``swebox eval``."""
    train = subparsers.add_parser("train", help="GRPO training from a YAML config with dotted overrides")
    train.add_argument("--config", required=True, help="a YAML file of configs/ (fields of TrainConfig)")
    train.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    train.add_argument("--ray", action="store_true", help="roll out on Ray (ray.address, or a local cluster)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. total_steps=3 optim.lr=1e-4")
    train.set_defaults(func=run_train)

    sft = subparsers.add_parser("sft", help="supervised / rejection-sampling fine-tuning on trajectories")
    sft.add_argument("--config", required=True, help="a YAML file of configs/ (fields of TrainConfig, sft.* too)")
    sft.add_argument(
        "--data",
        default="",
        help="gold (expert episodes from the tasks' patches) or a records file "
        "of `swebox eval --out` (its resolved episodes train); default: the config's sft.data",
    )
    sft.add_argument("--tasks", default="", help="tasks.jsonl for --data gold (default: the config's env.tasks)")
    sft.add_argument("overrides", nargs="*", help="dotted overrides, e.g. sft.epochs=5 logging.run_dir=runs/sft")
    sft.set_defaults(func=run_sft)

    ev = subparsers.add_parser("eval", help="resolved rate and time breakdown of a policy over a task set")
    ev.add_argument("--tasks", required=True, help="tasks.jsonl (or any source swebox.envs.tasks.load reads)")
    ev.add_argument("--policy", default="", help="gold | empty (or giveup) | hf:MODEL_FOLDER | openai:BASE_URL")
    ev.add_argument(
        "--harness",
        default="",
        help="an agent program plays instead of the text loop: mini-swe-agent "
        "or 'command:SHELL COMMAND' (sets env.harness; docs/envs.md, 'Harness episodes')",
    )
    ev.add_argument(
        "--harness-install",
        default="",
        help="host folder of the harness's install, e.g. a venv with mini-swe-agent (sets env.harness_install)",
    )
    ev.add_argument("--model", default="", help="model name sent to an openai: server")
    ev.add_argument("--config", default=None, help="a training config whose env/generation sections to use")
    ev.add_argument(
        "--layers",
        default="",
        help="layer store (default $SWEBOX_LAYER_STORE or runs/layers), or a "
        "folder of unpacked layer folders named by key",
    )
    ev.add_argument(
        "--calibration",
        default="",
        help="a `swebox tasks calibrate` file: leave out unsolvable and "
        "trivial tasks, quarantine flaky tests (a summary line says what was left out)",
    )
    ev.add_argument(
        "--calibration-order",
        default="",
        choices=CALIBRATION_ORDERS,
        help="with --calibration: evaluate the tasks by the calibrated policy's solve rate, as the trainer's "
        "env.calibration_order (easy_first | hard_first; unrated tasks last; default: the config's, else none)",
    )
    ev.add_argument("--parallel", type=int, default=2, help="episodes at once (default 2)")
    ev.add_argument(
        "--out",
        default="",
        help="write one JSON record per task (docs/training.md) to this file, "
        "and the per-task table as Markdown next to it (OUT.md); with --predictions: the report "
        "(default <model>.<run-id>.json)",
    )
    ev.add_argument(
        "--predictions-out",
        default="",
        help="also write the episodes' diffs as SWE-bench predictions "
        "(JSON lines: instance_id, model_name_or_path, model_patch) for --predictions or the harness",
    )
    ev.add_argument(
        "--wandb",
        default="disabled",
        choices=["auto", "online", "offline", "disabled"],
        help="also log the per-task table (wandb Table `eval`) and the summary to a wandb run in "
        "OUT's folder (needs --out; default disabled)",
    )
    ev.add_argument(
        "--wandb-group",
        default="",
        help="with --wandb: the wandb group (e.g. the training run's "
        "logging.group), so that the evaluation sits next to the runs it evaluates",
    )
    ev.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. env.max_turns=10")
    from swebox.scripts.eval_cli import add_score_options, add_search_options

    add_score_options(ev)
    add_search_options(ev)
    ev.set_defaults(func=run_eval)


def run_train(args: argparse.Namespace) -> int:
    from swebox.trainers.rl.trainer import Trainer, TrainingError
    from swebox.trainers.run.checkpoint import CheckpointError
    from swebox.trainers.run.config import load_config

    overrides = [*args.overrides, *(["checkpoint.resume=true"] if args.resume else [])]
    cfg = load_config(args.config, overrides)
    refuse_earlier_run(cfg)
    from swebox.trainers.distributed.ray_connect import ConnectError, is_loopback, use_loopback
    from swebox.trainers.distributed.ray_pool import RayPoolError

    if is_loopback(cfg.ray.address):
        use_loopback()  # before anything imports Ray: a loopback head is reached on loopback only (ray_connect)
    trainer = None
    try:
        trainer = Trainer(cfg, use_ray=True if args.ray else None)
        records = trainer.train()
    except (TrainingError, ConnectError, RayPoolError, CheckpointError) as exc:  # the run cannot go on: say why
        raise SystemExit(f"swebox train: {exc}") from exc
    except KeyboardInterrupt:  # Ctrl-C: train() has closed the pool; say where the run can go on from
        print(f"swebox train: {interrupted_train(cfg, trainer)}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    if records:
        last = records[-1]
        print(
            f"step {last['step']}: reward/mean {last['reward/mean']:.3f}, resolved {last['reward/resolved_rate']:.3f}"
        )
    print(
        f"run folder: {cfg.logging.run_dir} (metrics.jsonl, checkpoints/, policy/); plots: swebox plot "
        f"{cfg.logging.run_dir}"
    )
    return 0


def interrupted_train(cfg: Any, trainer: Any) -> str:
    """The line Ctrl-C in ``swebox train`` ends with: the step reached and how to continue (exit status 130)."""
    from swebox.trainers.run.checkpoint import latest_checkpoint

    newest = latest_checkpoint(cfg.checkpoint.dir or Path(cfg.logging.run_dir) / "checkpoints")
    where = f"at step {trainer.step_count} of {cfg.total_steps}" if trainer is not None else "before step 1"
    if newest is None:
        return f"interrupted {where}; no checkpoint yet: rerun the command to start again"
    return f"interrupted {where}; the newest checkpoint is {newest}: add --resume to the command to continue from it"


def refuse_earlier_run(cfg: Any, resumable: bool = True) -> None:
    """A plain ``swebox train`` (or any ``swebox sft``) into a folder that holds a run stops with one line instead
    of overwriting it: metrics.jsonl would restart at step 1 and the checkpoints and policy/ be replaced
    (``swebox train --resume`` continues a run; an SFT run is short and is not resumed: it goes to a new folder)."""
    from swebox.trainers.run.checkpoint import earlier_run
    from swebox.trainers.run.config import ConfigError

    if cfg.checkpoint.resume and resumable:
        return
    run_dir = cfg.logging.run_dir
    held = earlier_run(run_dir, cfg.checkpoint.dir or Path(run_dir) / "checkpoints")
    if held:
        go_on = "Continue it with --resume, or start" if resumable else "Start"
        raise ConfigError(
            f"logging.run_dir={run_dir}: expected a new or empty run folder; found an earlier run "
            f"({held}). {go_on} a new run with logging.run_dir=ANOTHER_FOLDER (or delete the folder)"
        )


def run_sft(args: argparse.Namespace) -> int:
    from swebox.trainers.finetune.sft import run_sft as fine_tune
    from swebox.trainers.run.config import load_config

    chosen = [*([f"sft.data={args.data}"] if args.data else []), *([f"env.tasks={args.tasks}"] if args.tasks else [])]
    cfg = load_config(args.config, [*args.overrides, *chosen])
    refuse_earlier_run(cfg, resumable=False)
    result = fine_tune(cfg)
    first, last = result.records[0], result.records[-1]
    print(
        f"sft: {last['step']} steps on {result.report.kept} trajectories; loss {first['sft/loss']:.3f} -> "
        f"{last['sft/loss']:.3f}, token accuracy {last['sft/token_accuracy']:.3f}"
    )
    print(
        f"policy: {result.policy}; GRPO from it: swebox train --config CONFIG model.init=pretrained "
        f"model.path={result.policy}"
    )
    return 0
