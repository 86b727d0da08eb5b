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
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swebox.envs.episodes.turns import Episode

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


# -------------------------------------------------------------------------------------------- evaluation


def gold_replies(task: Any) -> list[str]:
    """The replies of the gold policy in bash_block style: write the fix, apply it, submit."""
    from swebox.envs.agent.formats import SUBMIT_REPLIES, command_reply
    from swebox.trainers.finetune.sft_data import apply_command

    return [command_reply(apply_command(task.patch), "bash_block"), SUBMIT_REPLIES["bash_block"]]


def play_text_episode(episode: Episode, reply, max_turns: int) -> dict[str, Any]:
    """Drive an episode with a text policy ``reply(messages) -> str``; returns the final info, timings and the
    episode fields of a trajectory record (prompt, turns, diff, grade: trainers/run/trajectories.py).

    ``messages`` in the result is the chat as played (the first messages, then each reply and the observation
    after it), which ``swebox sft`` trains on (trainers/finetune/sft_data.py).
    """
    from swebox.envs.episodes.loop import EpisodeLoop, TextPolicy, ended_fields

    t0 = time.monotonic()
    messages = list(episode.reset())
    prompt = [dict(m) for m in messages]
    env_s = time.monotonic() - t0
    loop = EpisodeLoop(episode, TextPolicy(reply, messages))
    loop.play(max_turns)
    turns = loop.turns
    model_s, env_s = sum(t["generate_s"] for t in turns), env_s + sum(t["env_s"] for t in turns)
    info, reward = loop.info, loop.reward
    ended = ended_fields(info)
    metrics = info.get("metrics") or {}
    resolved = bool(metrics.get("env/resolved", 0.0))
    return {
        "reward": reward,
        "resolved": resolved,
        "error": info.get("error", ""),
        "model_s": model_s,
        "env_s": env_s - metrics.get("env/grade_s", 0.0),
        "metrics": metrics,
        "task_id": str(info.get("task_id", "")),
        "failed": bool(info.get("error")),
        "truncated": False,
        "num_turns": len(turns),
        "reason": ended["reason"],
        "prompt": prompt,
        "turns": turns,
        "diff": ended["diff"],
        "grade": ended["grade"],
        "messages": messages,
        "audit": ended["audit"],
        "provenance": ended["provenance"],
        "cost": ended["cost"],
    }


def _text_policy(args: argparse.Namespace, cfg: Any):
    """(replies factory per task) for gold / empty / openai policies."""
    if args.policy == "gold":

        def for_task(task):
            replies = gold_replies(task)
            # a function of the conversation, not a running iterator: forked lines replay it independently
            return lambda messages: replies[min(sum(m["role"] == "assistant" for m in messages), len(replies) - 1)]

        return for_task
    if args.policy in ("empty", "giveup"):
        from swebox.envs.agent.formats import SUBMIT_REPLIES

        return lambda task: lambda messages: SUBMIT_REPLIES["bash_block"]
    from swebox.trainers.policy.generation import OpenAIBackend

    gen = dataclasses.replace(
        cfg.generation, backend="openai", openai_base_url=args.policy[len("openai:") :], openai_model=args.model
    )
    backend = OpenAIBackend(gen)
    return lambda task: lambda messages: backend.chat(messages)[0]


def _harness_lines(args: argparse.Namespace, cfg: Any, backend: Any, tokenizer: Any):
    """For a search with ``env.harness``: per task, who plays its harness lines (a fresh gateway model per line:
    a scripted one keeps no state across lines), seeded per task as a single harness episode is."""
    from swebox.envs.search import HarnessPolicy
    from swebox.trainers.policy.sampling import sample_seed
    from swebox.trainers.rl.harness_rollout import harness_model

    def policy(task: Any) -> HarnessPolicy:
        return HarnessPolicy(
            cfg.env.harness_config(),
            lambda line: harness_model(args, cfg, task, backend, tokenizer),
            sample_seed(cfg.seed, "eval", task.instance_id),
        )

    return policy


def _hf_text_policy(backend: Any, tokenizer: Any, cfg: Any):
    """(replies factory per task) for a local model: the chat template in, sampled text out (search at
    inference plays conversations, not token streams)."""
    from swebox.trainers.rl.rollout import render

    def reply(messages: list[dict[str, str]]) -> str:
        ids = tokenizer.encode(render(tokenizer, messages, add_generation_prompt=True), add_special_tokens=False)
        room = max(1, min(cfg.generation.max_new_tokens, cfg.generation.max_context_tokens - len(ids)))
        return tokenizer.decode(backend.generate([ids], room)[0].token_ids, skip_special_tokens=True)

    return lambda task: reply


def _check_hf_folder(path: str) -> None:
    """``--policy hf:PATH`` names a transformers folder with its tokenizer, or one line says what is missing
    (not the internal ``model.path``/``model.tokenizer`` the policy is loaded through)."""
    from swebox.trainers.run.config import ConfigError

    folder = Path(path)
    missing = (
        "no folder there"
        if not folder.is_dir()
        else "no config.json in it"
        if not (folder / "config.json").is_file()
        else "no tokenizer in it (tokenizer.json or tokenizer_config.json)"
        if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))
        else ""
    )
    if missing:
        raise ConfigError(
            f"--policy hf:{path}: expected a transformers model folder with its tokenizer (config.json, "
            f"weights, tokenizer.json: e.g. a run's policy/, which swebox train and swebox sft write); "
            f"found {missing} (relative paths start at {Path.cwd()})"
        )


def _check_policy(policy: str) -> None:
    if not policy:
        raise SystemExit("swebox eval: expected --policy (play episodes) or --predictions (score given patches)")
    if policy in ("gold", "empty", "giveup") or policy.startswith(("hf:", "openai:")) and ":" in policy:
        return
    raise SystemExit(f"--policy: expected gold, empty, giveup, hf:MODEL_FOLDER or openai:BASE_URL; found {policy!r}")


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
    from swebox.trainers.run.trajectories import episode_fields

    _check_policy(args.policy)
    search = search_options(args)
    if args.policy.startswith("hf:"):  # the flags first, then the tasks and their layers
        _check_hf_folder(args.policy[3:])
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
        replies_for = _text_policy(args, cfg)
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
        harness_for = _harness_lines(args, cfg, backend, tokenizer) if cfg.env.harness else None
        if not cfg.env.harness and args.policy.startswith("hf:"):
            replies_for = _hf_text_policy(backend, tokenizer, cfg)
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
                    m = traj.metrics
                    rec = {
                        **episode_fields(traj),
                        "model_s": m.get("timing/generate_s", 0.0),
                        "env_s": m.get("timing/env_s", 0.0),
                    }
                    if traj.response_ids:
                        rec.update(prompt_ids=traj.prompt_ids, response_ids=traj.response_ids, loss_mask=traj.loss_mask)
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
                    m = traj.metrics
                    rec = {
                        **episode_fields(traj),
                        "model_s": m.get("timing/generate_s", 0.0),
                        "env_s": m.get("timing/env_s", 0.0),
                        "prompt_ids": traj.prompt_ids,
                        "response_ids": traj.response_ids,
                        "loss_mask": traj.loss_mask,
                    }
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
