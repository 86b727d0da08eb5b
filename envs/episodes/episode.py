"""One SWE episode, with no framework types: reset -> (reply -> observation)* -> reward.

``SWEEpisode.reset()`` restores the task's start state (a sandbox started over its layers, or the overlay of
the previous episode dropped: milliseconds) and returns the first messages (system prompt and task prompt).
``step(reply)`` runs the reply's action through :class:`swebox.envs.agent.tools.ToolRunner`. The episode
ends when the agent submits (``terminated``), after ``max_turns`` turns or past ``time_limit_s`` of wall
clock (``truncated``). Then, once, the agent's diff (:mod:`swebox.envs.episodes.episode_state`) is graded in a fresh
sandbox by :func:`swebox.envs.tasks.graders.grading.grade`, and that grade is the reward.

A sandbox that dies under the agent's own action (its memory, its processes) ends the episode with reward 0 and
``env/sandbox_deaths`` = 1, as any failed attempt: not an environment error (``env/errors``), which a trainer
masks out of the loss, so that a policy cannot escape a low reward by crashing its sandbox.

Its configuration (:class:`EpisodeConfig`), first messages and :class:`StepResult` live in
:mod:`swebox.envs.episodes.episode_config` and are importable from here. The Gymnasium and SkyRL wrappers
(gym_env.py, skyrl_env.py), GRPO groups (groups.py) and search open their episodes with
:func:`swebox.envs.episodes.task_episodes.open_task`, which holds the task's layers for them.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from swebox.envs.agent.formats import SUBMIT_REPLIES
from swebox.envs.agent.observations import truncate_middle
from swebox.envs.agent.tools import ToolRunner
from swebox.envs.audit import EpisodeAudit
from swebox.envs.episodes.episode_config import METRIC_NAMES, EpisodeConfig, StepResult, first_messages
from swebox.envs.episodes.episode_cost import EpisodeCost, cost_metrics
from swebox.envs.episodes.episode_state import DiffUnavailable, EpisodeError, StartState, agent_diff, prepare_start
from swebox.envs.episodes.grade_cache import GradeCache, grade_key
from swebox.envs.sandbox import Sandbox, SandboxError
from swebox.envs.tasks.graders.grade_slots import grade_slot
from swebox.envs.tasks.graders.grading import GradeReport, grade
from swebox.envs.tasks.graders.provenance import provenance
from swebox.envs.tasks.schema import Task

__all__ = ["METRIC_NAMES", "EpisodeConfig", "SWEEpisode", "StepResult", "first_messages"]


def _new_metrics() -> dict[str, float]:
    return dict.fromkeys(METRIC_NAMES, 0.0)


class SWEEpisode:
    """One task's episodes in one sandbox: each ``reset()`` starts a new episode from the start state."""

    def __init__(
        self,
        task: Task,
        start: StartState,
        config: EpisodeConfig | None = None,
        sandbox: Sandbox | None = None,
        grade_cache: GradeCache | None = None,
    ) -> None:
        """``grade_cache``: verdicts shared with other episodes of this process (None: always grade)."""
        self.task = task
        self.grade_cache = grade_cache
        self.start = start
        self.config = config or EpisodeConfig()
        self.policy = self.config.policy()
        self.metrics = _new_metrics()
        self.report: GradeReport | None = None
        self.diff = ""
        self.turns = 0
        self.done = False
        self._sandbox = sandbox
        self._fresh = sandbox is not None  # a sandbox handed in is already in the start state
        self._runner: ToolRunner | None = None
        self._base_tree = start.base_tree
        self._started = 0.0
        self.audit = EpisodeAudit(task, self.config.audit)
        self.cost = EpisodeCost(self.config.cost)

    # -- lifecycle ------------------------------------------------------------------------------------
    def reset(self) -> list[dict[str, str]]:
        """Restore the start state; returns the first messages (system prompt, task prompt)."""
        t0 = time.monotonic()
        self.metrics, self.report, self.diff, self.turns, self.done = _new_metrics(), None, "", 0, False
        self.audit = EpisodeAudit(self.task, self.config.audit)
        self.cost = EpisodeCost(self.config.cost)
        # a reused sandbox has run earlier episodes: count from before this reset (a new one counts from zero)
        self.cost.begin(self._sandbox if not self._fresh else None, t0)
        if self._sandbox is None:
            self._sandbox = Sandbox(list(self.start.layers), self.policy).start()
        elif not self._fresh:
            self._sandbox.reset()
        self._fresh = False
        if not self.start.prepared:
            self._base_tree = prepare_start(self._sandbox, self.task, self.config.setup_timeout_s)
        if not self._base_tree:
            raise EpisodeError(
                "StartState.prepared is True but base_tree is empty: prepare it with "
                "swebox.envs.episodes.task_episodes.open_task(..., prepare=True)"
            )
        self._runner = ToolRunner(self._sandbox, self.config.actions(), self.config.observations())
        self.metrics["env/reset_s"] = time.monotonic() - t0
        self._started = time.monotonic()
        return self.messages()

    def messages(self) -> list[dict[str, str]]:
        """The episode's first messages (see :func:`first_messages`)."""
        return first_messages(self.task, self.config)

    def close(self) -> None:
        """Stop the sandbox; safe to call twice. The episode can be reset again afterwards (a new sandbox)."""
        sandbox, self._sandbox, self._runner = self._sandbox, None, None
        if sandbox is not None:
            sandbox.close()

    @property
    def sandbox(self) -> Sandbox | None:
        """The episode's own sandbox (the agent's files), None before reset and after close."""
        return self._sandbox

    def current_diff(self) -> str:
        """The agent's changes so far, as grading would take them (the episode goes on)."""
        if self._sandbox is None:
            raise RuntimeError("SWEEpisode.current_diff(): the episode has no sandbox (reset it first)")
        return agent_diff(
            self._sandbox, self.start, self.task, self._base_tree, self.policy, self.config.max_diff_bytes
        )[0]

    def fork(self, m: int) -> list[SWEEpisode]:
        """m live copies of this episode at its current turn, for search (swebox.envs.search).

        Each child has its own sandbox, started over my sandbox's layers plus one snapshot of my files, and my
        turn count, metrics and elapsed time; it is graded against the same start state. Processes are not
        part of a snapshot: each child's shell starts afresh (working folder, variables and background jobs of
        mine are gone), and the editor's undo history stays with me.
        """
        if not isinstance(m, int) or m < 1:
            raise ValueError(f"SWEEpisode.fork(m=...): expected a whole number of children >= 1; found {m!r}.")
        if self.done or self._runner is None or self._sandbox is None:  # reset() sets both, the end clears both
            raise RuntimeError("SWEEpisode.fork(): the episode has ended (or was never reset)")
        snap = self._sandbox.snapshot()
        children: list[SWEEpisode] = []
        try:
            for _ in range(m):
                sandbox = Sandbox([*self._sandbox.layers, snap], self.policy).start()
                child = SWEEpisode(self.task, self.start, self.config, sandbox=sandbox)
                child.metrics, child.turns, child._base_tree = dict(self.metrics), self.turns, self._base_tree
                child._fresh, child._started, child.audit = False, self._started, self.audit.copy()
                child.cost = self.cost.fork(self._sandbox)
                child._runner = ToolRunner(sandbox, self._runner.actions, self.config.observations())
                children.append(child)
        except BaseException:
            for child in children:
                child.close()
            raise
        finally:
            snap.discard_if_unused()  # no child started: nobody will release the snapshot
        return children

    # -- turns ------------------------------------------------------------------------------------------
    def step(self, reply: object) -> StepResult:
        """Run one reply (a string, or an OpenAI chat message dict for json_tool_call)."""
        if self.done or self._runner is None:
            raise RuntimeError("SWEEpisode.step(): the episode has ended (or was never reset); call reset()")
        self.turns += 1
        self.metrics["env/turns"] = float(self.turns)
        remaining = self.config.time_limit_s - (time.monotonic() - self._started)
        # a command never runs past the episode's wall-clock limit
        self._runner.actions = dataclasses.replace(
            self._runner.actions, command_timeout_s=max(1.0, min(self.config.command_timeout_s, remaining))
        )
        outcome = self._runner.step(reply, turns_left=self.config.max_turns - self.turns)
        self.metrics["env/exec_s"] += outcome.exec_s
        self.metrics["env/format_errors"] += outcome.format_error
        self.metrics["env/timeouts"] += outcome.timed_out
        action = outcome.action
        info: dict[str, Any] = {
            "task_id": self.task.instance_id,
            "turn": self.turns,
            "format_error": outcome.format_error,
            "timed_out": outcome.timed_out,
            "action": None if action is None else {"tool": action.tool, "arguments": dict(action.arguments)},
            "exit_code": outcome.exit_code,
            "exec_s": outcome.exec_s,
        }
        info["audit_turn"] = self.audit.turn(self.turns, info["action"], outcome.observation)
        reason = ""
        if outcome.error and not self._alive():  # the agent's action took the sandbox down: its failure
            reason, info["sandbox_error"] = "sandbox_died", outcome.error
        elif outcome.submitted:
            reason = "submitted"
        elif self.turns >= self.config.max_turns:
            reason = "max_turns"
        elif time.monotonic() - self._started >= self.config.time_limit_s:
            reason = "time_limit"
        if not reason:
            return StepResult(outcome.observation, 0.0, False, False, info)
        observation = outcome.observation
        if reason in ("max_turns", "time_limit"):
            note = f"\n[The episode ended: the {'turn' if reason == 'max_turns' else 'time'} limit was reached.]"
            observation = truncate_middle(observation, self.config.max_obs_chars - len(note)) + note
        reward = self._finish(reason, info)
        return StepResult(
            observation, reward, reason in ("submitted", "sandbox_died"), reason in ("max_turns", "time_limit"), info
        )

    def submit_reply(self) -> str | None:
        """The reply that submits in my action style (a trainer ends an episode that filled its context with
        it, graded as it stands); None once the episode has ended."""
        return None if self.done else SUBMIT_REPLIES[self.config.style]

    def end(self, reason: str = "step_limit") -> tuple[float, dict[str, Any]]:
        """End the episode from outside (e.g. Gymnasium's TimeLimit) and grade it as a truncation would be;
        returns the reward and the final info."""
        if self.done or self._runner is None:
            raise RuntimeError("SWEEpisode.end(): the episode has ended (or was never reset)")
        info: dict[str, Any] = {"task_id": self.task.instance_id, "turn": self.turns}
        return self._finish(reason, info), info

    def _alive(self) -> bool:
        try:
            # a fresh process, not the agent's shell: an agent that broke its shell did not kill its sandbox
            return self._sandbox is not None and self._sandbox.run("true", timeout=30).exit_code == 0
        except Exception:
            return False

    # -- the end -----------------------------------------------------------------------------------------
    def _finish(self, reason: str, info: dict[str, Any]) -> float:
        """Grade once (unless errored or configured not to) and fill the final info; returns the reward."""
        self.done = True
        info["reason"] = reason
        reward = 0.0
        if reason == "sandbox_died":
            self.metrics["env/sandbox_deaths"] = 1.0
        elif reason == "submitted" or self.config.grade_on_truncation:
            reward = self._grade(info)
        reward, info["audit"], audit_metrics = self.audit.finish(reward)
        self.metrics.update(audit_metrics)
        grade = self.report.to_dict() if self.report is not None else None
        info["cost"] = self.cost.finish(self._sandbox, grade, bool(self.metrics["env/grade_cache_hits"]))
        info["cost"]["grade_s"] = self.metrics["env/grade_s"]
        self.metrics.update(cost_metrics(info["cost"]))
        info["reward"] = reward
        info["metrics"] = dict(self.metrics)
        info["grade"] = grade
        info["diff"] = self.diff
        info["provenance"] = (
            self.report.provenance
            if self.report is not None
            else provenance(self.task, list(self.start.grade_layers), self.policy)
        )  # not graded: what would have graded it
        return reward

    def _grade(self, info: dict[str, Any]) -> float:
        t0 = time.monotonic()
        try:
            # the episode is over: quiesced, nothing of the agent's runs beside the capture
            assert self._sandbox is not None  # ended, not closed: the sandbox is still there
            self.diff, info["diff_source"] = agent_diff(
                self._sandbox,
                self.start,
                self.task,
                self._base_tree,
                self.policy,
                self.config.max_diff_bytes,
                quiesce=True,
            )
        except DiffUnavailable as exc:  # the agent's doing (a full disk, a giant file): no reward, no error
            info["diff_error"] = str(exc)
            return 0.0
        except (SandboxError, EpisodeError, OSError) as exc:
            if not self._alive():  # the sandbox died after the agent's last command (a background process)
                info["reason"], info["sandbox_error"] = "sandbox_died", f"{type(exc).__name__}: {exc}"
                self.metrics["env/sandbox_deaths"] = 1.0
                return 0.0
            info["error"] = f"taking the agent's diff failed: {type(exc).__name__}: {exc}"
            self.metrics["env/errors"] = 1.0
            return 0.0
        layers = list(self.start.grade_layers)
        waited = 0.0

        def run() -> GradeReport:
            nonlocal waited
            with grade_slot(self.config.grade_slots) as waited:  # parallel episodes queue here, not time out
                return grade(
                    self.task,
                    self.diff,
                    layers=layers,
                    policy=self.policy,
                    timeout=self.config.grade_timeout_s,
                    reward_mode=self.config.reward_mode,
                )

        try:
            if self.grade_cache is None:
                self.report = run()
            else:
                key = grade_key(
                    self.task,
                    self.diff,
                    layers,
                    reward_mode=self.config.reward_mode,
                    timeout=self.config.grade_timeout_s,
                    policy=self.config.sandbox,
                )
                self.report, hit = self.grade_cache.get_or_grade(key, run)
                self.metrics["env/grade_cache_hits"] = float(hit)
        except Exception as exc:  # grading infrastructure failed; the trainer masks errored episodes
            info["error"] = f"grading failed: {type(exc).__name__}: {exc}"
            self.metrics["env/errors"] = 1.0
            return 0.0
        finally:
            self.metrics["env/grade_wait_s"] = waited
            self.metrics["env/grade_s"] = time.monotonic() - t0 - waited
        self.metrics["env/resolved"] = float(self.report.resolved)
        total = self.report.f2p_total
        self.metrics["env/f2p_frac"] = self.report.f2p_passed / total if total else 0.0
        return float(self.report.reward)
