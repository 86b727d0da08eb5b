"""``swebox train`` and ``swebox eval``: GRPO training from a config, and a policy's resolved rate on a task set.

``swebox train --config configs/grpo_tiny_cpu.yaml [--resume] [--ray] [key=value ...]`` runs the trainer
(trainers/trainer.py) with dotted overrides (trainers/config.py).

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
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HEREDOC = "SWEBOX_GOLD_PATCH_EOF"


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    """Register ``swebox train`` and ``swebox eval``."""
    train = subparsers.add_parser("train", help="GRPO training from a YAML config with dotted overrides")
    train.add_argument("--config", required=True, help="a YAML file of configs/ (fields of TrainConfig)")
    train.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    train.add_argument("--ray", action="store_true", help="roll out on Ray (ray.address, or a local cluster)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. total_steps=3 optim.lr=1e-4")
    train.set_defaults(func=run_train)

    ev = subparsers.add_parser("eval", help="resolved rate and time breakdown of a policy over a task set")
    ev.add_argument("--tasks", required=True, help="tasks.jsonl (or any source swebox.envs.tasks.load reads)")
    ev.add_argument("--policy", required=True, help="gold | empty | hf:MODEL_FOLDER | openai:BASE_URL")
    ev.add_argument("--model", default="", help="model name sent to an openai: server")
    ev.add_argument("--config", default=None, help="a training config whose env/generation sections to use")
    ev.add_argument("--layers", default="", help="layer store (default $SWEBOX_LAYER_STORE or runs/layers), or a "
                    "folder of unpacked layer folders named by key")
    ev.add_argument("--parallel", type=int, default=2, help="episodes at once (default 2)")
    ev.add_argument("--out", default="", help="write one JSON result per task to this file")
    ev.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. env.max_turns=10")
    ev.set_defaults(func=run_eval)


def run_train(args: argparse.Namespace) -> int:
    from swebox.trainers.config import load_config
    from swebox.trainers.trainer import Trainer, TrainingError

    overrides = [*args.overrides, *(["checkpoint.resume=true"] if args.resume else [])]
    cfg = load_config(args.config, overrides)
    try:
        trainer = Trainer(cfg, use_ray=True if args.ray else None)
        records = trainer.train()
    except TrainingError as exc:  # what the run cannot go on without: the message says it, no traceback
        raise SystemExit(f"swebox train: {exc}") from exc
    if records:
        last = records[-1]
        print(f"step {last['step']}: reward/mean {last['reward/mean']:.3f}, "
              f"resolved {last['reward/resolved_rate']:.3f}")
    print(f"run folder: {cfg.logging.run_dir} (metrics.jsonl, checkpoints/, policy/); plots: swebox plot "
          f"{cfg.logging.run_dir}")
    return 0


# -------------------------------------------------------------------------------------------- evaluation


def gold_replies(task: Any) -> list[str]:
    """The replies of the gold policy in bash_block style: write the fix, apply it, submit."""
    command = f"cat > /tmp/gold.diff <<'{HEREDOC}'\n{task.patch}{HEREDOC}\ncd /testbed && git apply /tmp/gold.diff"
    return [f"```bash\n{command}\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]


def play_text_episode(episode: Any, reply, max_turns: int) -> dict[str, Any]:
    """Drive an episode with a text policy ``reply(messages) -> str``; returns the final info and timings."""
    t0 = time.monotonic()
    messages = list(episode.reset())
    env_s, model_s = time.monotonic() - t0, 0.0
    info: dict[str, Any] = {}
    reward = 0.0
    for _ in range(max_turns):
        t = time.monotonic()
        text = reply(messages)
        model_s += time.monotonic() - t
        t = time.monotonic()
        result = episode.step(text)
        env_s += time.monotonic() - t
        info, reward = dict(result.info or {}), float(result.reward)
        if result.terminated or result.truncated:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": result.observation}]
    metrics = info.get("metrics") or {}
    return {"reward": reward, "resolved": bool(metrics.get("env/resolved", 0.0)), "error": info.get("error", ""),
            "model_s": model_s, "env_s": env_s - metrics.get("env/grade_s", 0.0), "metrics": metrics}


def _text_policy(args: argparse.Namespace, cfg: Any):
    """(replies factory per task) for gold / empty / openai policies."""
    if args.policy == "gold":
        def for_task(task):
            replies = iter(gold_replies(task))
            return lambda messages: next(replies, "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
        return for_task
    if args.policy == "empty":
        return lambda task: (lambda messages: "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
    from swebox.trainers.generation import OpenAIBackend

    gen = dataclasses.replace(cfg.generation, backend="openai", openai_base_url=args.policy[len("openai:"):],
                              openai_model=args.model)
    backend = OpenAIBackend(gen)
    return lambda task: (lambda messages: backend.chat(messages)[0])


def _check_policy(policy: str) -> None:
    if policy in ("gold", "empty") or policy.startswith(("hf:", "openai:")) and ":" in policy:
        return
    raise SystemExit(f"--policy: expected gold, empty, hf:MODEL_FOLDER or openai:BASE_URL; found {policy!r}")


def run_eval(args: argparse.Namespace) -> int:
    from swebox.envs.groups import group
    from swebox.envs.layers_resolver import LayerSource
    from swebox.envs.tasks import load
    from swebox.trainers.config import load_config
    from swebox.trainers.rollout import episode_config, play_episode
    from tqdm import tqdm

    _check_policy(args.policy)
    cfg = load_config(args.config, args.overrides)
    tasks = list(load(args.tasks))
    plain = bool(args.layers) and not (Path(args.layers) / "manifests").is_dir()
    source = LayerSource(store="" if plain else args.layers, dirs=args.layers if plain else "",
                         cache_root=cfg.env.cache_dir, tasks_file=args.tasks)
    econf = episode_config(cfg)
    if args.policy.startswith("hf:"):
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init="pretrained", path=args.policy[3:],
                                                                 tokenizer=""))
        from swebox.trainers.generation import make_backend
        from swebox.trainers.tiny import build_model, build_tokenizer

        tokenizer = build_tokenizer(cfg.model)
        backend = make_backend(cfg.generation, build_model(cfg.model, tokenizer).eval(), tokenizer)
    else:
        replies_for = _text_policy(args, cfg)

    def one(task) -> dict[str, Any]:
        started = time.monotonic()
        try:
            with group(task, 1, source=source, config=econf) as g:
                if args.policy.startswith("hf:"):
                    traj = play_episode(g[0], backend, tokenizer, cfg, task.instance_id, task.instance_id)
                    m = traj.metrics
                    out = {"reward": traj.reward, "resolved": bool(m.get("env/resolved", 0.0)), "error": traj.error,
                           "model_s": m.get("timing/generate_s", 0.0), "env_s": m.get("timing/env_s", 0.0),
                           "metrics": m}
                else:
                    out = play_text_episode(g[0], replies_for(task), cfg.env.max_turns)
        except Exception as exc:  # one broken task must not end the evaluation
            out = {"reward": 0.0, "resolved": False, "error": f"{type(exc).__name__}: {exc}", "model_s": 0.0,
                   "env_s": 0.0, "metrics": {"env/errors": 1.0}}
        out.update(instance_id=task.instance_id, total_s=time.monotonic() - started)
        return out

    results = []
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        for result in tqdm(pool.map(one, tasks), total=len(tasks), desc=f"eval {args.policy}", unit="task"):
            results.append(result)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in results))
    print(summary(results, args.policy))
    return 0


def summary(results: list[dict[str, Any]], policy: str) -> str:
    """Resolved rate and the time breakdown (sums over episodes) as printed by ``swebox eval``."""
    n = max(1, len(results))
    resolved = sum(r["resolved"] for r in results)
    errors = sum(bool(r["error"]) for r in results)
    parts = {"env reset": sum(r["metrics"].get("env/reset_s", 0.0) for r in results),
             "commands": sum(r["metrics"].get("env/exec_s", 0.0) for r in results),
             "model": sum(r["model_s"] for r in results),
             "grading": sum(r["metrics"].get("env/grade_s", 0.0) for r in results)}
    total = sum(r["total_s"] for r in results) or 1.0
    breakdown = ", ".join(f"{k} {v:.2f}s ({v / total:.0%})" for k, v in parts.items())
    return (f"policy {policy}: resolved {resolved}/{len(results)} ({resolved / n:.1%}), "
            f"mean reward {sum(r['reward'] for r in results) / n:.3f}, errors {errors}\n"
            f"time over all episodes ({total:.2f}s): {breakdown}")
