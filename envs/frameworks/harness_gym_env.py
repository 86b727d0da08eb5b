"""The Gymnasium face of harness episodes: ``gymnasium.make("swebox/SWE-Harness-v0", tasks=..., harness=...)``
(registered on ``import swebox.envs``). The RL agent is the model behind the harness: each step answers one
of the harness's model calls (envs/gateway/handoff.py)."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from swebox.envs.agent.observations import truncate_middle
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.episodes.task_episodes import TaskEpisodes, open_task
from swebox.envs.frameworks.gym_env import CHARSET, load_tasks, merged_config, pick_task
from swebox.envs.gateway.handoff import Handoff, PendingCall, completion_of
from swebox.envs.gateway.harness import HarnessConfig, HarnessRun, end_harness, episode_config, run_harness
from swebox.envs.tasks.schema import Task

ENV_ID = "swebox/SWE-Harness-v0"
NO_CALL = json.dumps({"messages": [], "tools": []})
"""The observation when no call is pending: after the end, and at reset when the harness exited without one."""


def observation_of(call: PendingCall, max_chars: int) -> str:
    """``{"messages": [...], "tools": [...]}`` of ``call`` as ASCII JSON of at most ``max_chars`` characters: the
    longest message contents are cut in the middle (marker included) until it fits."""
    messages = [dict(m) for m in call.messages]
    tools = list(call.request.get("tools") or [])
    text = json.dumps({"messages": messages, "tools": tools})  # ensure_ascii: printable ASCII only
    while len(text) > max_chars:
        longest = max(range(len(messages)), key=lambda i: len(str(messages[i].get("content") or "")), default=-1)
        content = messages[longest].get("content") if longest >= 0 else None
        keep = len(content) - (len(text) - max_chars) - 64 if isinstance(content, str) else -1
        if keep < 64:
            raise ValueError(
                f"SWEHarnessGymEnv: the harness's request takes {len(text)} characters as JSON, and its message "
                f"contents cannot be cut to fit max_prompt_chars={max_chars}; raise max_prompt_chars"
            )
        messages[longest]["content"] = truncate_middle(content, keep)
        text = json.dumps({"messages": messages, "tools": tools})
    return text


class SWEHarnessGymEnv(gym.Env[str, str]):
    """Be the model behind an agent program (a harness) that fixes a bug in a real Python repository.

    ## Description
    Each episode is one SWE task in a container-free sandbox, played by a harness (mini-swe-agent, or
    ``command:<shell command>``: docs/envs.md, "Harness episodes") that runs on a background thread. Its
    model calls go through the episode's gateway, which hands each one over to this env: the observation is
    the harness's pending chat request, the action is the model's reply. The harness runs the commands it
    reads in the reply and asks again; the episode ends when it exits or a limit stops it.

    ## Action Space
    ``Text(max_length=max_reply_chars, charset=CHARSET)``: the assistant's reply text. To answer with OpenAI
    tool calls, the action is the assistant message as JSON text (or a dict, outside the space):
    ``{"content": "...", "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": {...}}}]}``
    (an object whose keys are among ``content`` and ``tool_calls``; ``arguments`` a JSON object or its text;
    ``type`` and ``id`` may be left out). Any other text is the reply as it stands. A message that cannot be
    read (a tool call without a name, arguments that are not a JSON object, JSON cut short) is answered as
    text, whole, with the reason in ``info["parse_error"]`` and the call's record; the harness then does what
    it does with a malformed reply (a format error). An action neither str nor dict raises TypeError and
    leaves the call pending.

    ## Observation Space
    ``Text(min_length=0, max_length=max_prompt_chars, charset=CHARSET)``: the pending request as JSON with
    ``ensure_ascii`` (printable ASCII only): ``{"messages": [...OpenAI chat messages...], "tools": [...]}``
    (``tools`` is [] when the harness offers none). Over the limit, the longest message contents are cut in
    the middle. ``info["request"]`` holds the whole call uncut: ``messages``, ``tools``, ``max_tokens``,
    ``seed`` and ``request`` (every other field the harness sent). With no call pending the observation is
    ``{"messages": [], "tools": []}``.

    ## Rewards
    0.0 on every step but the last. At the end the sandbox's changes are graded as a text episode's
    (:class:`~swebox.envs.frameworks.gym_env.SWEGymEnv`, ``reward_mode``), by ``end_harness``.

    ## Starting State
    As SWEGymEnv's; ``reset`` then starts the harness and returns its first call. A harness that exits
    without calling the model at all still starts an episode: reset returns ``{"messages": [], "tools": []}``
    with ``info["pending"] = False``, and the first step (its action is not used) ends it, graded.

    ## Episode End
    Terminated when the harness exits on its own (``info["reason"] == "submitted"``) or the sandbox dies.
    Truncated when a limit stops it: ``max_turns`` (the gateway's ``max_calls``), ``time_limit`` (its
    ``wall_s``, also for a call left unanswered that long, or the episode's ``time_limit_s``), ``step_limit``
    (``gymnasium.make(..., max_episode_steps=N)``: graded by GradeOnTruncation). A stopped harness gets HTTP
    403 for its call. A step after the end raises RuntimeError; reset starts a new episode.

    ## Arguments
    As SWEGymEnv's (``tasks``, ``layers``, ``config``, EpisodeConfig fields as keywords, ``render_mode``),
    plus ``harness``: a HarnessConfig or its dict (``harness``, ``install``, ``limits``...), and
    ``stop_timeout_s``: how long close (or a reset or TimeLimit mid-episode) waits for a harness to exit
    after its call was refused before killing the sandbox's processes. ``info`` holds ``task_id``, ``turn``
    (the calls answered), ``pending`` and ``request``; the last step adds the final info of ``end_harness``:
    ``reason``, ``metrics`` (env/*, harness/*, gateway/*), ``grade``, ``diff``, ``audit``, ``harness`` (exit
    code, output tail) and ``gateway`` (every call's record).

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        tasks: str | Path | Sequence[Task | dict],
        harness: HarnessConfig | dict,
        layers: LayerSource | dict | Callable[[Task], list] | None = None,
        config: EpisodeConfig | dict | None = None,
        render_mode: str | None = None,
        stop_timeout_s: float = 30.0,
        **config_fields: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"SWEHarnessGymEnv(render_mode=...): expected None or one of {self.metadata['render_modes']}; "
                f"found {render_mode!r}."
            )
        self.harness = harness if isinstance(harness, HarnessConfig) else HarnessConfig(**harness)
        self.config = episode_config(merged_config(config, config_fields), self.harness)
        self.tasks = load_tasks(tasks)
        self._by_id = {t.instance_id: t for t in self.tasks}
        self._layers = layers if callable(layers) else LayerSource.from_dict(layers)
        self.render_mode = render_mode
        self.stop_timeout_s = stop_timeout_s
        self.observation_space = spaces.Text(min_length=0, max_length=self.config.max_prompt_chars, charset=CHARSET)
        self.action_space = spaces.Text(min_length=0, max_length=self.config.max_reply_chars, charset=CHARSET)
        self._episode: SWEEpisode | None = None
        self._opened: TaskEpisodes | None = None
        self._handoff: Handoff | None = None
        self._thread: threading.Thread | None = None
        self._pending: PendingCall | None = None
        self._run: HarnessRun | None = None
        self._ended = True
        self._killed = False
        self._turn = 0
        self._last = NO_CALL

    # -- episodes --------------------------------------------------------------------------------------
    def _pick(self, options: dict[str, Any] | None) -> Task:
        return pick_task(self.tasks, self._by_id, options, self.np_random)

    def _episode_for(self, task: Task) -> SWEEpisode:
        if self._episode is not None and self._episode.task is task and not self._killed:
            return self._episode
        self._close_episode()
        self._killed = False
        self._opened = open_task(task, self._layers, self.config)
        self._episode = self._opened.episode()
        return self._episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._stop_harness("the episode was reset")
        episode = self._episode_for(self._pick(options))
        handoff = Handoff(self.harness.limits.wall_s)
        self._handoff, self._run, self._pending, self._ended, self._turn = handoff, None, None, False, 0

        def play() -> None:  # the harness's thread: its run, then one last event
            try:
                handoff.events.put(("exit", run_harness(episode, handoff, self.harness, seed)))
            except BaseException as exc:  # handed to the driver's thread, which raises it
                handoff.events.put(("error", exc))

        self._thread = threading.Thread(target=play, name=f"swebox-harness-{episode.task.instance_id}", daemon=True)
        self._thread.start()
        self._next_event()
        info = {**self._info(), "reset_s": episode.metrics["env/reset_s"]}
        return self._last, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._episode is None or self._handoff is None:
            raise RuntimeError("SWEHarnessGymEnv.step() before reset() or after close(): call reset() first")
        if self._ended:
            raise RuntimeError("SWEHarnessGymEnv.step() after the episode ended: call reset() first")
        info: dict[str, Any] = {}
        if self._pending is not None:
            completion = completion_of(action, self._turn)  # raises TypeError before anything changes
            if completion.parse_error:
                info["parse_error"] = completion.parse_error
            pending, self._pending = self._pending, None
            self._handoff.answer(pending, completion)
            self._turn += 1
            self._next_event()
        if self._pending is not None:
            return self._last, 0.0, False, False, {**self._info(), **info}
        return self._finish("", info)

    def end_episode(self, reason: str = "step_limit") -> tuple[float, dict]:
        """Stop the harness and grade the episode now (a wrapper truncated it); returns the reward and the final
        info."""
        if self._episode is None or self._ended:
            raise RuntimeError("SWEHarnessGymEnv.end_episode(): no episode is running")
        _, reward, _, _, info = self._finish(reason, {})
        return reward, info

    def _finish(self, reason: str, info: dict[str, Any]) -> tuple[str, float, bool, bool, dict]:
        """Stop the harness if it still runs, grade, and return the last step's result."""
        assert self._episode is not None
        self._ended = True
        self._stop_harness(f"the episode ended ({reason})" if reason else "the episode ended")
        if self._run is None:
            raise RuntimeError("SWEHarnessGymEnv: the harness's run was stopped without a result (see close())")
        reward, final = end_harness(self._episode, self.harness, self._run, reason=reason)
        self._pending, self._last = None, NO_CALL
        terminated = final["reason"] in ("submitted", "sandbox_died")
        return self._last, float(reward), terminated, not terminated, {**self._info(), **info, **final}

    def _info(self) -> dict[str, Any]:
        assert self._episode is not None
        pending = self._pending
        return {
            "task_id": self._episode.task.instance_id,
            "turn": self._turn,
            "pending": pending is not None,
            "request": pending.to_dict() if pending is not None else None,
        }

    def _next_event(self) -> None:
        """Wait for the harness's next call or its exit; an error of its thread is raised here."""
        assert self._handoff is not None and self._thread is not None
        while True:
            try:
                kind, value = self._handoff.events.get(timeout=1.0)
                break
            except queue.Empty:  # the thread is bounded by the episode's time limit: keep waiting
                if not self._thread.is_alive() and self._handoff.events.empty():
                    raise RuntimeError("SWEHarnessGymEnv: the harness's thread ended without a result") from None
        if kind == "call":
            self._pending = value
            self._last = observation_of(value, self.config.max_prompt_chars)
        elif kind == "exit":
            self._run, self._pending, self._last = value, None, NO_CALL
        else:
            self._ended = True
            self._thread.join(timeout=self.stop_timeout_s)
            raise RuntimeError(f"SWEHarnessGymEnv: the harness's run failed: {value!r}") from value

    def _stop_harness(self, why: str) -> None:
        """Refuse the harness's calls from now on and wait for its thread; past ``stop_timeout_s``, kill the
        sandbox's processes (the next reset then opens a new sandbox)."""
        thread, handoff = self._thread, self._handoff
        if thread is None or handoff is None:
            return
        handoff.stop(why)
        thread.join(timeout=self.stop_timeout_s)
        if thread.is_alive():  # a harness that ignores refusals: its sandbox's processes die with nsinit
            sandbox = self._episode.sandbox if self._episode is not None else None
            if sandbox is not None and sandbox.pid:
                try:
                    os.kill(sandbox.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            thread.join(timeout=max(self.stop_timeout_s, 30.0))
            self._killed = True  # its sandbox is dead: the next reset opens a new one
        if thread.is_alive():
            raise RuntimeError(f"SWEHarnessGymEnv: the harness's thread did not stop ({why})")
        self._thread = None
        while not handoff.events.empty():  # its last event: the run (or its error) ends the wait
            kind, value = handoff.events.get_nowait()
            if kind == "exit":
                self._run = value
        self._pending = None

    def render(self) -> str | None:
        return self._last if self.render_mode == "ansi" else None

    def _close_episode(self) -> None:
        opened, self._opened, self._episode = self._opened, None, None
        if opened is not None:  # its episode's sandbox, then the task's layers
            opened.close()

    def close(self) -> None:
        """Stop the harness (its pending call is refused) and close the sandbox and the task's layers; safe to
        call twice and mid-episode (nothing is graded then)."""
        try:
            self._stop_harness("the env was closed")
        finally:
            self._ended, self._handoff = True, None
            self._close_episode()
