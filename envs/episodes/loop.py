"""The one episode loop: ask the policy, step the episode, record the turn, stop when it ends or a limit says so.

The trainer's rollouts (token in, token out: ``swebox.trainers.rl.token_episode``), ``swebox eval`` with a text
policy (``swebox.scripts.eval_policies``) and search (``swebox.envs.search.tree``) all play their episodes with
:class:`EpisodeLoop`. What differs between them is the policy side, behind the :class:`Policy` contract: the
trainer's keeps token ids and sampling logprobs and may run out of context; a text policy keeps a conversation
(:class:`TextPolicy`). The loop is steppable (:meth:`EpisodeLoop.step` plays one turn), so that search can fork a
line between turns and count turns against its budgets; :meth:`EpisodeLoop.play` plays to the end.

The agent-program episode of ``swebox.trainers.rl.harness_rollout`` is not played here: there the agent program
runs its own loop and calls the policy through the model gateway.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from swebox.envs.episodes.turns import Episode, Step, turn_record


@dataclass(frozen=True)
class PolicyReply:
    """One policy turn as the loop sees it."""

    text: str
    """The reply the episode steps with."""
    tokens: int | None = None
    """Tokens the policy generated for it (None for a text policy)."""
    finish_reason: str = ""
    """Why the generation stopped: 'stop' or 'length' ('' for a text policy)."""


class Policy(Protocol):
    """The policy side of one episode: what it has been shown so far, and its next reply."""

    def reply(self, number: int) -> PolicyReply | None:
        """The reply for turn ``number`` (from 1); None when the policy has no room left to reply (its context is
        full): the loop then stops with ``out_of_room``."""
        ...

    def observe(self, reply: PolicyReply, observation: str) -> bool:
        """Show the observation that followed ``reply``; False when there is no room for it and a reply to it
        (the loop then stops with ``out_of_room``)."""
        ...


class TextPolicy:
    """A text policy ``reply(messages) -> str`` over the conversation it keeps (``messages``: the first messages,
    then each reply and the observation after it). ``fork()`` copies the conversation for a forked line."""

    def __init__(self, reply: Callable[[list[dict[str, str]]], str], messages: list[dict[str, str]]) -> None:
        self.reply_fn = reply
        self.messages = messages

    def reply(self, number: int) -> PolicyReply:
        text = self.reply_fn(list(self.messages))
        self.messages.append({"role": "assistant", "content": text})
        return PolicyReply(text)

    def observe(self, reply: PolicyReply, observation: str) -> bool:
        self.messages.append({"role": "user", "content": observation})
        return True

    def fork(self) -> TextPolicy:
        return TextPolicy(self.reply_fn, list(self.messages))


class EpisodeLoop:
    """Plays ``episode`` with ``policy``, a turn at a time.

    ``played``: turns the episode had played before this loop took it over (a forked line goes on from its
    parent's turn, and numbers its turns on from there). ``time_limit_s``: wall-clock seconds from the loop's start
    after which a turn that did not end the episode raises TimeoutError (for an episode without a clock of its
    own; None: none). Each ``reset``, reply and step is timed: ``intervals`` holds their (kind, start, end) spans in
    time.time(), kind 'env' or 'generate'.
    """

    def __init__(self, episode: Episode, policy: Policy, *, played: int = 0, time_limit_s: float | None = None) -> None:
        self.episode, self.policy = episode, policy
        self.played = played
        """The number of the last turn played."""
        self.time_limit_s = time_limit_s
        self.turns: list[dict[str, Any]] = []
        """This loop's turns, each a :func:`swebox.envs.episodes.turns.turn_record`."""
        self.reward = 0.0
        """The last step's reward (the grade's, once the episode ended)."""
        self.info: dict[str, Any] = {}
        """The last step's info (with the grade, diff, reason and metrics once the episode ended)."""
        self.last: Step | None = None
        """The last step's result (None before the first)."""
        self.done = False
        """The episode ended: it submitted, or hit its own limits (turns, time)."""
        self.out_of_room = False
        """The policy ran out of context before the episode ended (see :meth:`submit`)."""
        self.intervals: list[tuple[str, float, float]] = []
        self._started = time.monotonic()

    @property
    def ended(self) -> bool:
        """No more turns: the episode ended or the policy is out of room."""
        return self.done or self.out_of_room

    def _env(self, fn: Callable[[], Any]) -> Any:
        start = time.time()
        try:
            return fn()
        finally:
            self.intervals.append(("env", start, time.time()))

    def reset(self) -> list[dict[str, str]] | str:
        """Start the episode; its first messages (the policy is to be shown them)."""
        return self._env(self.episode.reset)

    def step(self) -> bool:
        """One turn: the policy's reply, the episode's step, the turn's record, and the observation shown to the
        policy when the episode goes on. True when there will be no more turns (:attr:`ended`)."""
        if self.ended:
            return True
        t0 = time.time()
        reply = self.policy.reply(self.played + 1)
        if reply is None:
            self.out_of_room = True
            return True
        t1 = time.time()
        self.intervals.append(("generate", t0, t1))
        self.played += 1
        result = self._env(lambda: self.episode.step(reply.text))
        self.last, self.info, self.reward = result, dict(result.info or {}), float(result.reward)
        self.turns.append(
            turn_record(
                self.played,
                reply.text,
                self.info,
                result.observation,
                t1 - t0,
                time.time() - t1,
                reply.tokens,
                reply.finish_reason,
            )
        )
        if result.terminated or result.truncated:
            self.done = True
            return True
        if self.time_limit_s is not None and time.monotonic() - self._started > self.time_limit_s:
            raise TimeoutError(f"the episode ran past its time limit of {self.time_limit_s:g} s")
        if not self.policy.observe(reply, result.observation):
            self.out_of_room = True
            return True
        return False

    def play(self, max_turns: int = 0) -> bool:
        """Turns until the episode ends, the policy is out of room, or this loop played ``max_turns`` (0: no
        limit); True when it ended (False: stopped by ``max_turns``)."""
        while not self.ended:
            if max_turns and len(self.turns) >= max_turns:
                return False
            self.step()
        return True

    def submit(self) -> bool:
        """End an episode the policy ran out of room in by submitting it as it stands, which grades it (not a
        turn: the policy did not reply); False when the episode cannot take a submission."""
        reply = self.episode.submit_reply()
        if reply is None:
            return False
        result = self._env(lambda: self.episode.step(reply))
        self.last, self.info, self.reward = result, dict(result.info or {}), float(result.reward)
        self.done = True
        return True


def ended_fields(info: dict[str, Any]) -> dict[str, Any]:
    """What an ended episode's info says about it, as a trajectory record's fields (docs/training.md,
    "Trajectories on disk"): diff, grade, reason, audit, provenance, cost."""
    return {
        "diff": str(info.get("diff") or ""),
        "grade": info.get("grade"),
        "reason": str(info.get("reason", "")),
        "audit": info.get("audit"),
        "provenance": info.get("provenance"),
        "cost": info.get("cost"),
    }
