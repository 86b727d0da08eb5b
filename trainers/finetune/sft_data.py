"""SFT data: trajectories to fine-tune the policy on, in exactly the token layout of RL rollouts.

Every example is a :class:`~swebox.trainers.rl.rollout.Trajectory`: the prompt (the chat template applied to the
episode's first messages), then the response, model turns (``loss_mask`` 1) and the chat template's
observation deltas between them (``loss_mask`` 0), as ``trainers/rl/rollout.py`` builds them for GRPO. Sources:

- **expert** (``sft.data=gold``): each task's episode played in a real sandbox, with the real action format,
  by a scripted policy that knows the gold patch: inspect the code the patch changes, apply the patch, run the
  failing tests, submit. It goes through the same :func:`~swebox.trainers.rl.rollout.play_episode` as RL (a
  :class:`ScriptedBackend` stands in for the model), so the grader decides its reward; only resolved ones are
  kept (a gold episode that is not resolved means a broken task, and is reported).
- **records** (``sft.data=FILE``): JSON lines written by ``swebox eval --out`` (or rollout trajectory files,
  ``.jsonl.gz`` too). Rejection sampling: a record trains only when its ``resolved`` is true. A record carries
  its episode either as tokens (``prompt_ids``, ``response_ids``, ``loss_mask``: the ids as sampled), as chat
  ``messages`` (role/content; the model's texts are encoded here like the rollout code encodes turns), or as
  its ``prompt`` and ``turns`` (a harness episode whose model gave no token ids: :func:`turn_messages`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebox.envs.agent.expert import expert_replies
from swebox.envs.tasks import progress
from swebox.envs.tasks.schema import Task
from swebox.trainers.policy.generation import Generated
from swebox.trainers.rl.rollout import (
    EpisodeFactory,
    Trajectory,
    close_episodes,
    encode,
    observation_delta_ids,
    play_episode,
    prompt_ids,
)
from swebox.trainers.run.config import TrainConfig


class ScriptedBackend:
    """A generation backend that "samples" the given replies, one per turn, as token ids (logprob 0).

    A reply longer than the turn's token budget is cut there, as the model's would be (``finish_reason``
    'length'); the episode then sees the cut text, like it would a real policy's.
    """

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.turn = tokenizer, list(replies), 0

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None
    ) -> list[Generated]:
        text = self.replies[min(self.turn, len(self.replies) - 1)]
        self.turn += 1
        ids = [*encode(self.tokenizer, text), int(self.tokenizer.eos_token_id)]
        if len(ids) > max_new_tokens:
            return [Generated(ids[:max_new_tokens], [0.0] * max_new_tokens, "length") for _ in prompts]
        return [Generated(ids, [0.0] * len(ids), "stop") for _ in prompts]

    def update_weights(self, state_dict_or_model: Any) -> None:
        raise TypeError("ScriptedBackend: a scripted policy has no weights")


@dataclass
class DataReport:
    """What a source gave: kept examples and, by reason, what was left out (never silently)."""

    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """reason -> count: 'not resolved', 'failed', 'longer than generation.max_context_tokens=N', 'turn cut at
    generation.max_new_tokens=N' (a reply cut at its token budget, so the episode could not resolve)."""
    examples: dict[str, str] = field(default_factory=dict)
    """reason -> the first task id it happened to (to look at)."""
    longest_turn: int = 0
    """Tokens of the longest model turn among the kept trajectories that carry turns (expert episodes)."""

    def drop(self, reason: str, task_id: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        self.examples.setdefault(reason, task_id)

    def __str__(self) -> str:
        left = ", ".join(f"{n} {why} (e.g. {self.examples[why]})" for why, n in self.dropped.items())
        return f"{self.kept} kept" + (f"; left out: {left}" if left else "")

    def advice(self) -> str:
        """What to change so that the left-out examples train, by reason."""
        fixes = []
        if any(why.startswith(("longer than", "turn cut")) for why in self.dropped):
            fixes.append(
                "raise generation.max_context_tokens (and model.max_position_embeddings) or "
                "generation.max_new_tokens, whichever the reason names, or set sft.minimal_patch=true "
                "(a patch without context lines)"
            )
        if "not resolved" in self.dropped:
            fixes.append(
                "check the tasks with `swebox eval --policy gold` (a gold patch that does not resolve "
                "is a broken task), or use a records file with resolved episodes"
            )
        if "failed" in self.dropped:
            fixes.append("fix the environment errors (`swebox eval --policy gold` shows each task's error)")
        return "; ".join(fixes)


def expert_generation(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` for playing expert episodes: a scripted expert is not sampled from the model, so its turns are
    bounded by the context (``generation.max_context_tokens``) only, not by ``generation.max_new_tokens`` (the
    tiny config's 64 tokens cut the patch turn, and every gold episode ended unresolved)."""
    # (the most the config allows: a turn also takes only the room the context has left)
    gen = dataclasses.replace(cfg.generation, max_new_tokens=cfg.generation.max_context_tokens - 1)
    return dataclasses.replace(cfg, generation=gen)


def expert_trajectories(
    tasks: list[Task], cfg: TrainConfig, factory: EpisodeFactory, tokenizer: Any
) -> tuple[list[Trajectory], DataReport]:
    """One expert episode per task (real sandbox, real grading); the resolved ones, in task order."""
    played_cfg = expert_generation(cfg)

    def one(task: Task) -> Trajectory:
        replies = expert_replies(task, cfg.env.style, cfg.sft.minimal_patch)
        episodes = factory(task, 1)
        try:
            return play_episode(
                list(episodes)[0],
                ScriptedBackend(tokenizer, replies),
                tokenizer,
                played_cfg,
                task.instance_id,
                f"expert:{task.instance_id}",
            )
        finally:
            close_episodes(episodes)

    with (
        ThreadPoolExecutor(max_workers=max(1, cfg.rollout.max_parallel_episodes)) as pool,
        progress.bar(len(tasks), "sft expert episodes", "episode", cfg.logging.progress) as shown,
    ):
        played = []
        for traj in pool.map(one, tasks):
            played.append(traj)
            shown.update()
    return keep(played, played_cfg)


def keep(trajs: list[Trajectory], cfg: TrainConfig) -> tuple[list[Trajectory], DataReport]:
    """Rejection sampling: resolved, not failed, and within ``generation.max_context_tokens``; each left-out
    trajectory is counted under the limit or the reason that kept it out."""
    report, kept = DataReport(), []
    gen = cfg.generation
    for t in trajs:
        cut = [turn for turn in t.turns if turn.get("finish_reason") == "length"]
        if t.failed:
            report.drop("failed", t.task_id)
        elif t.truncated or len(t.prompt_ids) + len(t.response_ids) > gen.max_context_tokens:
            # an overflow ends unresolved
            report.drop(f"longer than generation.max_context_tokens={gen.max_context_tokens}", t.task_id)
        elif t.metrics.get("env/resolved", t.reward) < 1.0:
            if cut and int(cut[0].get("tokens") or 0) >= gen.max_new_tokens:
                report.drop(f"turn cut at generation.max_new_tokens={gen.max_new_tokens}", t.task_id)
            elif cut:  # the turn had less room than its budget: the context was full
                report.drop(f"turn cut at generation.max_context_tokens={gen.max_context_tokens}", t.task_id)
            else:
                report.drop("not resolved", t.task_id)
        else:
            kept.append(t)
            report.longest_turn = max([report.longest_turn, *(int(turn.get("tokens") or 0) for turn in t.turns)])
    report.kept = len(kept)
    return kept, report


# ------------------------------------------------------------------------------------------ records


def trajectory_from_messages(tokenizer: Any, messages: list[dict[str, str]], task_id: str = "") -> Trajectory:
    """A chat (first messages, then assistant / user turns alternating) in the rollout layout.

    Each assistant text becomes its ids plus the end-of-turn token (``loss_mask`` 1); each user message after
    one becomes :func:`~swebox.trainers.rl.rollout.observation_delta_ids` (``loss_mask`` 0). A trailing user message
    (an observation nothing answered) is left out: there is nothing to learn after it.
    """
    roles = [m.get("role") for m in messages]
    if "assistant" not in roles:
        raise ValueError(f"record {task_id}: expected messages with an assistant turn; found roles {roles}")
    first = roles.index("assistant")
    if first == 0:
        raise ValueError(
            f"record {task_id}: expected the prompt's messages before the first assistant turn; found roles {roles}"
        )
    traj = Trajectory(task_id=task_id, group_id=f"record:{task_id}", prompt_ids=prompt_ids(tokenizer, messages[:first]))
    rest = messages[first:]
    while rest and rest[-1].get("role") != "assistant":
        rest = rest[:-1]
    for i, message in enumerate(rest):
        want = "assistant" if i % 2 == 0 else "user"
        if message.get("role") != want:
            raise ValueError(
                f"record {task_id}: expected assistant and user turns to alternate after the prompt; "
                f"found {message.get('role')!r} at turn {i}; roles {roles}"
            )
        if want == "assistant":
            ids = [*encode(tokenizer, str(message.get("content", ""))), int(tokenizer.eos_token_id)]
            mask = 1
        else:
            ids = observation_delta_ids(tokenizer, str(message.get("content", "")), ended_turn=True)
            mask = 0
        traj.response_ids += ids
        traj.loss_mask += [mask] * len(ids)
        traj.old_logprobs += [0.0] * len(ids)
    traj.num_turns = (len(rest) + 1) // 2
    return traj


def turn_messages(prompt: list[dict[str, Any]], turns: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation of a record that keeps its turns but not its messages (a harness episode answered by a
    model without token ids: the first call's messages, then per call the reply and what the harness sent back)."""
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    for turn in turns:
        messages.append({"role": "assistant", "content": str(turn["text"])})
        if turn.get("observation"):
            messages.append({"role": "user", "content": str(turn["observation"])})
    return messages


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """JSON lines (``.gz``: gzip-compressed), one record per line; a bad line is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"sft.data: expected 'gold' or a JSON-lines file of episode records; found "
            f"{str(path)!r}, which is not a file; write one with `swebox eval --out FILE`"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}:{n}: expected one JSON object per line; found {line[:80]!r} ({exc})"
                ) from None
    return records


def record_trajectories(
    records: list[dict[str, Any]], tokenizer: Any, cfg: TrainConfig, source: str = "records"
) -> tuple[list[Trajectory], DataReport]:
    """Rejection sampling over episode records: the resolved ones as trajectories (see the module docstring)."""
    trajs = []
    vocab = len(tokenizer)
    for n, r in enumerate(records, 1):
        task_id = str(r.get("instance_id", f"#{n}"))
        if "resolved" not in r:
            raise ValueError(
                f"{source} record {n} ({task_id}): expected a 'resolved' field (rejection sampling "
                f"keeps resolved episodes); found keys {sorted(r)}; write records with swebox eval --out"
            )
        if all(k in r for k in ("prompt_ids", "response_ids", "loss_mask")):
            ids = [*r["prompt_ids"], *r["response_ids"]]
            if ids and max(ids) >= vocab:
                raise ValueError(
                    f"{source} record {n} ({task_id}): expected token ids of this tokenizer "
                    f"(< {vocab}); found {max(ids)}; use the tokenizer the records were made with"
                )
            t = Trajectory(
                task_id,
                f"record:{task_id}",
                list(r["prompt_ids"]),
                list(r["response_ids"]),
                list(r["loss_mask"]),
                [0.0] * len(r["response_ids"]),
            )
        elif isinstance(r.get("messages"), list):
            t = trajectory_from_messages(tokenizer, r["messages"], task_id)
        elif r.get("prompt") and r.get("turns") and isinstance(r["prompt"], list) and isinstance(r["turns"], list):
            t = trajectory_from_messages(tokenizer, turn_messages(r["prompt"], r["turns"]), task_id)
        else:
            raise ValueError(
                f"{source} record {n} ({task_id}): expected the episode as 'messages', as "
                f"'prompt' and 'turns', or as 'prompt_ids'/'response_ids'/'loss_mask'; found keys "
                f"{sorted(r)}; write records with a swebox eval that records them (--out)"
            )
        t.reward = float(r.get("reward", 0.0))
        t.metrics = {"env/resolved": 1.0 if r["resolved"] else 0.0}
        t.failed = bool(r.get("error"))
        trajs.append(t)
    return keep(trajs, cfg)
