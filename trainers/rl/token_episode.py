"""One episode, token in and token out: the policy plays it and it becomes a :class:`Trajectory`.

One trajectory is the prompt (the chat template applied to the episode's first messages) followed by the
*response*: every token after the prompt, the model's and the environment's, in order. The model's tokens
are kept exactly as sampled (never decoded and encoded again), with their sampling logprobs; after each
model turn the observation is appended as the chat template's *delta* (what the template adds for one more
user message and the next assistant header), tokenised on its own. ``loss_mask`` is 1 only on model tokens.

The turns are played by the episode layer's loop (:class:`swebox.envs.episodes.loop.EpisodeLoop`, which eval and
search share); :class:`TokenPolicy` is the policy side it asks: the generation backend over the token stream.
``swebox.trainers.rl.rollout`` runs such episodes in groups.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.episodes.loop import EpisodeLoop, PolicyReply, ended_fields
from swebox.envs.episodes.turns import Episode
from swebox.trainers.policy.generation import GenerationBackend
from swebox.trainers.policy.sampling import sample_seed
from swebox.trainers.run.config import TrainConfig


@dataclass
class Trajectory:
    """One episode as the learner sees it. Crosses Ray as itself (pickled); trajectories.py writes it to files."""

    task_id: str
    """The task's instance_id."""
    group_id: str
    """Identifies the group (the G rollouts of one task in one step); advantages are normalised within it."""
    prompt_ids: list[int]
    """The first messages with the chat template applied, ending with the assistant header."""
    response_ids: list[int] = field(default_factory=list)
    """All tokens after the prompt: model turns as sampled, observation deltas between them."""
    loss_mask: list[int] = field(default_factory=list)
    """1 on model tokens, 0 on observation tokens; aligned with response_ids."""
    old_logprobs: list[float] = field(default_factory=list)
    """Sampling logprob of each model token, 0.0 where loss_mask is 0; aligned with response_ids."""
    reward: float = 0.0
    """The episode's reward (after the context-overflow rule)."""
    failed: bool = False
    """The environment (not the policy) failed: the trajectory is masked out of the loss."""
    truncated: bool = False
    """The episode filled generation.max_context_tokens (handled per rollout.on_context_overflow)."""
    num_turns: int = 0
    """Model turns played."""
    metrics: dict[str, float] = field(default_factory=dict)
    """env/* metrics of the episode and its timing/* (generate_s, env_s, grade_s, episode_s)."""
    intervals: list[tuple[str, float, float]] = field(default_factory=list)
    """(kind, start, end) wall-clock (time.time) spans of 'generate', 'env' and 'grade' work, so that a
    step's timing/* can be the union over concurrent episodes rather than their sum."""
    error: str = ""
    """Why the trajectory failed ('' when it did not)."""
    prompt: list[dict[str, str]] = field(default_factory=list)
    """The episode's first messages (system prompt, task prompt) as text."""
    turns: list[dict[str, Any]] = field(default_factory=list)
    """Per model turn, for people and fine-tuning (swebox.envs.episodes.turns.turn_record): turn, text, action,
    observation, exit_code, timed_out, format_error, generate_s, env_s, exec_s, tokens, finish_reason."""
    diff: str = ""
    """The final diff that was graded ('' when none)."""
    grade: dict[str, Any] | None = None
    """The grade report (GradeReport.to_dict()), None when the episode was not graded."""
    reason: str = ""
    """Why the episode ended: submitted, max_turns, time_limit, error (the env's), or '' when unknown."""
    audit: dict[str, Any] | None = None
    """The exploit audit's summary (info["audit"], swebox.envs.audit): flagged, rules, action, findings."""
    provenance: dict[str, Any] | None = None
    """What produced the reward (info["provenance"]): task and layer digests, grader, dataset row, policy."""
    cost: dict[str, Any] | None = None
    """What the rollout cost the host (info["cost"], swebox.envs.episodes.episode_cost): wall, CPU, memory, bytes."""

    def __post_init__(self) -> None:
        lengths = {len(self.response_ids), len(self.loss_mask), len(self.old_logprobs)}
        if len(lengths) != 1:
            raise ValueError(
                f"Trajectory {self.task_id}: expected response_ids, loss_mask and old_logprobs of one length; "
                f"found {len(self.response_ids)}, {len(self.loss_mask)}, {len(self.old_logprobs)}; "
                "append to all three together"
            )

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)


# ------------------------------------------------------------------------------------- chat-template deltas


def render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """The chat template applied to ``messages`` (and, for a harness's tool-calling request, its ``tools``)."""
    return tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]] | str) -> list[int]:
    """The episode's first messages (a string is one user message) as ids, ending with the assistant header."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return encode(tokenizer, render(tokenizer, list(messages), add_generation_prompt=True))


_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]


def observation_delta_ids(tokenizer: Any, observation: str, ended_turn: bool) -> list[int]:
    """The ids that follow a model turn to show ``observation`` and open the next assistant turn.

    The template is rendered for a probe conversation with and without one more user message; the
    difference, plus whatever the template writes after the end-of-turn token (ChatML: a newline), is the
    delta. ``ended_turn``: the model's tokens already end with the end-of-turn token; when they do not
    (it ran out of tokens), that token is put in first, as the template would.
    """
    before = render(tokenizer, _PROBE, add_generation_prompt=False)
    after = render(tokenizer, [*_PROBE, {"role": "user", "content": observation}], add_generation_prompt=True)
    eos = tokenizer.eos_token
    end = before.rfind(eos)
    if not after.startswith(before) or end < 0:
        raise ValueError(
            "chat template: expected each new message to extend the rendered conversation and an assistant turn "
            f"to end with {eos!r}; found otherwise; use a template with that property (ChatML does)"
        )
    ids = encode(tokenizer, before[end + len(eos) :] + after[len(before) :])
    return ids if ended_turn else [int(tokenizer.eos_token_id), *ids]


# ------------------------------------------------------------------------------------------ one episode


class TokenPolicy:
    """The trainer's policy side of one episode (a :class:`swebox.envs.episodes.loop.Policy`): each reply is
    sampled from ``backend`` over the trajectory's tokens so far and appended to ``traj`` with its logprobs; each
    observation is appended as its chat-template delta. The context never exceeds ``max_context`` tokens.

    ``seed``: turn ``t`` samples with ``sample_seed(seed, t - 1)`` (None: the backend's own randomness)."""

    def __init__(
        self,
        traj: Trajectory,
        backend: GenerationBackend,
        tokenizer: Any,
        max_new_tokens: int,
        max_context: int,
        seed: int | None = None,
    ) -> None:
        self.traj, self.backend, self.tokenizer = traj, backend, tokenizer
        self.max_new_tokens, self.max_context, self.seed = max_new_tokens, max_context, seed

    def reply(self, number: int) -> PolicyReply | None:
        traj = self.traj
        room = self.max_context - len(traj.prompt_ids) - len(traj.response_ids)
        if room <= 0:
            return None
        seeds = [sample_seed(self.seed, number - 1)] if self.seed is not None else None
        out = self.backend.generate([traj.prompt_ids + traj.response_ids], min(self.max_new_tokens, room), seeds)[0]
        traj.response_ids += out.token_ids
        traj.loss_mask += [1] * len(out.token_ids)
        traj.old_logprobs += list(out.logprobs)
        traj.num_turns += 1
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        return PolicyReply(text, len(out.token_ids), out.finish_reason)

    def observe(self, reply: PolicyReply, observation: str) -> bool:
        traj = self.traj
        delta = observation_delta_ids(self.tokenizer, observation, reply.finish_reason == "stop")
        if len(traj.prompt_ids) + len(traj.response_ids) + len(delta) >= self.max_context:
            return False  # no room for the observation and a reply to it
        traj.response_ids += delta
        traj.loss_mask += [0] * len(delta)
        traj.old_logprobs += [0.0] * len(delta)
        return True


def play_episode(
    episode: Episode,
    backend: GenerationBackend,
    tokenizer: Any,
    cfg: TrainConfig,
    task_id: str = "",
    group_id: str = "",
    seed: int | None = None,
) -> Trajectory:
    """Play one episode with the policy behind ``backend``; never raises for an environment failure.

    ``seed``: the episode's sampling seed; turn ``t`` samples with ``sample_seed(seed, t)``, so the episode's
    tokens depend on it and on what the environment answered, not on other episodes (None: the backend's own
    randomness).

    The context (prompt + response) never exceeds ``generation.max_context_tokens``: a turn may generate only
    what is left, and an episode that runs out of room ends ``truncated`` and is handled per
    ``rollout.on_context_overflow`` ('truncate': submitted and graded as it stands; 'mask': ended unpaid,
    the trainer masks it; 'penalize': ended with ``rollout.overflow_reward``).
    """
    started = time.monotonic()
    traj = Trajectory(task_id=task_id, group_id=group_id, prompt_ids=[])
    gen = cfg.generation
    policy = TokenPolicy(traj, backend, tokenizer, gen.max_new_tokens, gen.max_context_tokens, seed)
    loop = EpisodeLoop(episode, policy, time_limit_s=cfg.env.time_limit_s)
    traj.turns = loop.turns  # the loop appends each turn's record as it plays it
    try:
        first = loop.reset()
        traj.prompt = [{"role": "user", "content": first}] if isinstance(first, str) else [dict(m) for m in first]
        traj.prompt_ids = prompt_ids(tokenizer, first)
        loop.play()
        traj.reward = loop.reward
        if loop.out_of_room:
            traj.truncated = True
            _end_overflowing(loop, traj, cfg)
        info = loop.info
        if info.get("error"):
            traj.failed, traj.error = True, str(info["error"])
        ended = ended_fields(info)
        traj.diff, traj.grade, traj.reason = ended["diff"], ended["grade"], ended["reason"]
        traj.audit, traj.provenance, traj.cost = ended["audit"], ended["provenance"], ended["cost"]
    except Exception as exc:  # an environment failure must not end the step: mask the trajectory instead
        traj.failed = True
        traj.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        traj.reward = 0.0
    env_metrics = {k: float(v) for k, v in (loop.info.get("metrics") or {}).items() if isinstance(v, (int, float))}
    if traj.failed:
        env_metrics["env/errors"] = max(1.0, env_metrics.get("env/errors", 0.0))
    intervals = _split_grade_time(loop.intervals, env_metrics.get("env/grade_s", 0.0))
    traj.metrics = {
        **env_metrics,
        "timing/generate_s": _total(intervals, "generate"),
        "timing/env_s": _total(intervals, "env"),
        "timing/grade_s": _total(intervals, "grade"),
        "timing/episode_s": time.monotonic() - started,
    }
    traj.intervals = intervals
    return traj


def _end_overflowing(loop: EpisodeLoop, traj: Trajectory, cfg: TrainConfig) -> None:
    mode = cfg.rollout.on_context_overflow
    traj.reward = cfg.rollout.overflow_reward if mode == "penalize" else 0.0
    if mode == "truncate" and loop.submit():
        traj.reward = loop.reward


def _total(intervals: list[tuple[str, float, float]], kind: str) -> float:
    return sum(end - start for k, start, end in intervals if k == kind)


def _split_grade_time(intervals: list[tuple[str, float, float]], grade_s: float) -> list[tuple[str, float, float]]:
    """Grading runs inside the episode's last step: move its share of that 'env' span to 'grade'."""
    intervals = list(intervals)
    if grade_s <= 0:
        return intervals
    for i in range(len(intervals) - 1, -1, -1):
        kind, start, end = intervals[i]
        if kind == "env" and end - start >= grade_s * 0.999:
            intervals[i : i + 1] = [("env", start, end - grade_s), ("grade", end - grade_s, end)]
            break
    return intervals
