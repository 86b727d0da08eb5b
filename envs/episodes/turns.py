"""What an episode offers the loop that plays it, and the one record of a turn.

The trainer's rollouts (token in, token out: ``swebox.trainers.rl.token_episode``), ``swebox eval`` with a text
policy (``swebox.scripts.eval_policies``) and search (``swebox.envs.search.tree``) play their episodes with one loop,
:class:`swebox.envs.episodes.loop.EpisodeLoop`, over the :class:`Episode` contract below, and it writes each turn
with :func:`turn_record`, so a trajectory file, an eval record and a search node hold turns of one shape
(docs/training.md, "Trajectories on disk"); the agent-program episode (``swebox.trainers.rl.harness_rollout``)
writes its turns with it too. This lives in the episode layer because search (in ``envs``) needs it too and
``envs`` never imports ``trainers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Step(Protocol):
    """What one ``Episode.step`` returns (``swebox.envs.episodes.episode.StepResult`` is one)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Episode(Protocol):
    """What a loop needs from an episode (``swebox.envs.episodes.episode.SWEEpisode`` is one).

    ``submit_reply``: the reply that submits in the episode's action style, so that a loop can end an episode
    that ran out of context and have it graded as it stands; None when the episode cannot take it (it has
    ended, or it has no action style)."""

    def reset(self) -> list[dict[str, str]] | str: ...

    def step(self, reply: str) -> Step: ...

    def submit_reply(self) -> str | None: ...

    def close(self) -> None: ...


def turn_record(
    number: int,
    text: str,
    info: Mapping[str, Any],
    observation: str,
    generate_s: float,
    env_s: float,
    tokens: int | None = None,
    finish_reason: str = "",
) -> dict[str, Any]:
    """One turn: its number in the episode, the model's text, the action parsed from it, the observation, how
    long each part took and the exploit audit's rules that fired on it (``audit``: [] when none).
    ``tokens`` and ``finish_reason`` are the generation's (None and '' for a text policy)."""
    return {
        "turn": number,
        "text": text,
        "action": info.get("action"),
        "format_error": bool(info.get("format_error", False)),
        "audit": sorted({f["rule"] for f in info.get("audit_turn") or []}),
        "observation": observation,
        "exit_code": info.get("exit_code"),
        "timed_out": bool(info.get("timed_out", False)),
        "generate_s": generate_s,
        "env_s": env_s,
        "exec_s": float(info.get("exec_s", 0.0) or 0.0),
        "tokens": tokens,
        "finish_reason": finish_reason,
    }
