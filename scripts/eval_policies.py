"""The policies ``swebox eval --policy`` and ``swebox tasks calibrate --policy`` play (scripts/eval_play.py,
scripts/calibrate_policy.py): ``--policy`` checked (gold, empty, giveup, hf:MODEL_FOLDER, openai:URL), the text
policies' replies per task, and one text episode played to its end (:func:`play_text_episode`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swebox.envs.episodes.turns import Episode


def gold_replies(task: Any) -> list[str]:
    """The replies of the gold policy in bash_block style: write the fix, apply it, submit."""
    from swebox.envs.agent.expert import apply_command
    from swebox.envs.agent.formats import SUBMIT_REPLIES, command_reply

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


def text_policy(args: argparse.Namespace, cfg: Any):
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


def harness_lines(args: argparse.Namespace, cfg: Any, backend: Any, tokenizer: Any):
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


def hf_text_policy(backend: Any, tokenizer: Any, cfg: Any):
    """(replies factory per task) for a local model: the chat template in, sampled text out (search at
    inference plays conversations, not token streams)."""
    from swebox.trainers.rl.rollout import render

    def reply(messages: list[dict[str, str]]) -> str:
        ids = tokenizer.encode(render(tokenizer, messages, add_generation_prompt=True), add_special_tokens=False)
        room = max(1, min(cfg.generation.max_new_tokens, cfg.generation.max_context_tokens - len(ids)))
        return tokenizer.decode(backend.generate([ids], room)[0].token_ids, skip_special_tokens=True)

    return lambda task: reply


def check_hf_folder(path: str) -> None:
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


def check_policy(policy: str) -> None:
    if not policy:
        raise SystemExit("swebox eval: expected --policy (play episodes) or --predictions (score given patches)")
    if policy in ("gold", "empty", "giveup") or policy.startswith(("hf:", "openai:")) and ":" in policy:
        return
    raise SystemExit(f"--policy: expected gold, empty, giveup, hf:MODEL_FOLDER or openai:BASE_URL; found {policy!r}")
