"""Harness episodes: an agent program runs unchanged inside the task's sandbox, its model calls go through the
episode's gateway, and its changes are graded exactly as a text-loop episode's are.

A harness is either ``mini-swe-agent`` (PyPI ``mini-swe-agent``, its ``mini`` command in text-based mode) or
``command:<shell command>`` (any program that reads ``$OPENAI_BASE_URL`` and the task in ``$SWEBOX_TASK_FILE``).
Its install is a host folder (a venv, say) bound read-only into the sandbox at the same path; its interpreter
must be visible there too (the host's /usr is: a venv made with Debian's python3 works). The episode is the
text loop's :class:`~swebox.envs.episodes.episode.SWEEpisode`: the same start state, sandbox, diff capture, grader,
tamper defences, grade memo and reward; only the turns are the harness's own.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.gateway.calls import CallRecord, ChatModel, GatewayLimits
from swebox.envs.gateway.server import Gateway
from swebox.envs.gateway.turns import audit_calls, turn_records

TASK_FILE = "/tmp/swebox-harness/task.md"
OUTPUT_TAIL_CHARS = 20_000
__all__ = ["HarnessConfig", "HarnessRun", "end_harness", "end_reason", "play_harness", "run_harness", "turn_records"]
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""mini-swe-agent's submission command (its text-based config's instance template)."""


@dataclass
class HarnessConfig:
    """Which agent program plays the episode, where it is installed, and what it may spend."""

    harness: str = "mini-swe-agent"
    """"mini-swe-agent", or "command:<shell command>" run from the repository's folder with ``OPENAI_BASE_URL``,
    ``OPENAI_API_KEY`` and ``SWEBOX_TASK_FILE`` (the problem statement) set."""
    install: str = ""
    """Host folder of the harness's install, bound read-only into the sandbox at the same path (for
    mini-swe-agent: a venv whose bin/ holds ``mini``). Empty: the program is already in the sandbox."""
    limits: GatewayLimits = field(default_factory=GatewayLimits)
    """Model calls, sampled tokens and seconds the harness may spend through the gateway."""
    workdir: str = "/testbed"
    """The folder the harness starts in (the task's repository)."""

    def __post_init__(self) -> None:
        if isinstance(self.limits, dict):
            self.limits = GatewayLimits(**self.limits)
        if self.harness != "mini-swe-agent" and not (self.harness.startswith("command:") and self.harness[8:].strip()):
            raise ValueError(
                f"HarnessConfig.harness: expected 'mini-swe-agent' or 'command:<shell command>', found {self.harness!r}"
            )
        if self.install and not (os.path.isabs(self.install) and os.path.isdir(self.install)):
            raise ValueError(
                f"HarnessConfig.install: expected an absolute path of a folder on this host, found "
                f"{self.install!r}; install the harness first (docs/envs.md, 'Harness episodes')"
            )
        if (
            self.harness == "mini-swe-agent"
            and self.install
            and not os.access(os.path.join(self.install, "bin", "mini"), os.X_OK)
        ):
            raise ValueError(
                f"HarnessConfig.install: expected mini-swe-agent's `mini` in {self.install}/bin, found "
                "none; `python3 -m venv DIR && DIR/bin/pip install mini-swe-agent==2.4.6`"
            )


def episode_config(config: EpisodeConfig, harness: HarnessConfig) -> EpisodeConfig:
    """``config`` with the harness's install bound read-only into its sandboxes."""
    if not harness.install:
        return config
    sandbox = dict(config.sandbox)
    binds = tuple(sandbox.get("ro_binds", ()))
    if harness.install not in binds:
        sandbox["ro_binds"] = (*binds, harness.install)
    return dataclasses.replace(config, sandbox=sandbox)


def command_line(harness: HarnessConfig, base_url: str) -> str:
    """The shell command that runs the harness in the sandbox."""
    env = {
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_BASE": base_url,
        "OPENAI_API_KEY": "swebox",
        "SWEBOX_TASK_FILE": TASK_FILE,
        "HOME": "/tmp/swebox-harness",
        "NO_PROXY": "127.0.0.1",
    }
    if harness.harness == "mini-swe-agent":
        mini = os.path.join(harness.install, "bin", "mini") if harness.install else "mini"
        # text-based mode (bash blocks, no tool calls); first-run setup and cost lookups off: nothing to ask, no
        # network; the gateway's limits bound the run, not a price. No retries: the gateway is local and its
        # refusal final (mini-swe-agent retries a refused call with backoff for minutes: a paused search line
        # or a call past a limit would wait instead of exiting)
        env.update(
            MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT="1",
            MSWEA_CONFIGURED="true",
            MSWEA_COST_TRACKING="ignore_errors",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            MSWEA_SILENT_STARTUP="1",
        )
        program = (
            f'{shlex.quote(mini)} -c mini_textbased.yaml -c agent.cost_limit=0 -c agent.step_limit=0 '
            f'--model-class litellm_textbased -m openai/swebox-policy -y --exit-immediately '
            f'-o /tmp/swebox-harness/trajectory.json -t "$(cat {TASK_FILE})"'
        )
    else:
        program = harness.harness[len("command:") :]
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"cd {shlex.quote(harness.workdir)} && export {exports} && {program}"


@dataclass
class HarnessRun:
    """A harness's run in an episode's sandbox, before grading."""

    records: list[CallRecord]
    """Every call through the gateway, answered or refused, in arrival order."""
    result: Any
    """The sandbox's result of the harness's command (``exit_code``, ``timed_out``, ``output``)."""
    seconds: float
    """From the gateway's start to the harness's exit."""
    started_at: float
    """Wall-clock time the gateway started serving (a record's ``started_s`` counts from it)."""


def run_harness(episode: SWEEpisode, model: ChatModel, harness: HarnessConfig, seed: int | None = None) -> HarnessRun:
    """Reset ``episode`` and run the harness in its sandbox until it exits or hits a limit; not graded (search
    values or grades the state it left: :func:`end_harness`)."""
    episode.reset()
    sandbox = episode.sandbox
    assert sandbox is not None
    config = episode.config
    started = time.monotonic()
    with Gateway(model, harness.limits, seed) as gateway:
        base_url = gateway.serve_inside(sandbox.pid)
        sandbox.exec("mkdir -p /tmp/swebox-harness", timeout=30)
        sandbox.write_file(TASK_FILE, episode.task.problem_statement)
        wall = min(config.time_limit_s, harness.limits.wall_s + 60.0)  # its last call may still be answered
        result = sandbox.exec(command_line(harness, base_url), timeout=wall)
    episode.turns = sum(1 for r in gateway.records if r.completion is not None)
    return HarnessRun(gateway.records, result, time.monotonic() - started, gateway.started_at)


def end_reason(run: HarnessRun, imposed: tuple[str, ...] = ()) -> str:
    """Why the run ended, in a text episode's words: ``time_limit`` when the program was stopped or the gateway's
    ``wall_s`` refused its last call; ``max_turns`` when ``max_calls`` did (the turn limit); ``budget`` when the
    limit that refused it is one of ``imposed`` (the GatewayLimits fields a search tightened to its own budget,
    as a search line stopped by its budget ends); ``submitted`` otherwise: the program exited on its own, or
    after a refusal a text loop has no limit for (``max_tokens``, like a text policy out of room, submits)."""
    last = run.records[-1] if run.records else None
    limit = last.limit if last is not None and last.completion is None else ""
    if limit and limit in imposed:
        return "budget"
    if run.result.timed_out or limit == "wall_s":
        return "time_limit"
    return "max_turns" if limit == "max_calls" else "submitted"


def end_harness(
    episode: SWEEpisode,
    harness: HarnessConfig,
    run: HarnessRun,
    imposed: tuple[str, ...] = (),
    reason: str = "",
) -> tuple[float, dict[str, Any]]:
    """Grade what ``run`` left in ``episode``'s sandbox; returns the reward and the final info (the text loop's,
    plus ``harness`` and ``gateway``: the calls as records). ``imposed``: as :func:`end_reason`'s. ``reason``:
    why the run ended when its driver stopped it (a Gymnasium TimeLimit's ``step_limit``); '' reads it from the
    run (:func:`end_reason`)."""
    result = run.result
    audit_calls(episode.audit, run.records)
    reward, info = episode.end(reason or end_reason(run, imposed))
    tokens = sum(len(r.completion.token_ids) for r in run.records if r.completion is not None)
    exit_code = -1 if result.exit_code is None else result.exit_code  # None: timed out (float(None) raised)
    episode.metrics.update(
        {
            "harness/seconds": run.seconds,
            "harness/exit_code": float(exit_code),
            "harness/timed_out": float(result.timed_out),
            "gateway/calls": float(len(run.records)),
            "gateway/refused": float(sum(1 for r in run.records if r.error)),
            "gateway/tokens": float(tokens),
            "gateway/model_s": sum(r.seconds for r in run.records),
        }
    )
    info["metrics"] = dict(episode.metrics)
    info["harness"] = {
        "harness": harness.harness,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "seconds": run.seconds,
        "started_at": run.started_at,
        "output": result.output[-OUTPUT_TAIL_CHARS:],
    }
    info["gateway"] = [r.to_dict() for r in run.records]
    return reward, info


def play_harness(
    episode: SWEEpisode, model: ChatModel, harness: HarnessConfig, seed: int | None = None
) -> tuple[float, dict[str, Any]]:
    """Reset ``episode``, run the harness in its sandbox until it exits or hits a limit, grade; returns the
    reward and the final info (the text loop's, plus ``harness`` and ``gateway``: the calls as records).

    The harness is the agent: it runs in the agent's shell, and whatever it leaves is graded. Its exit code is
    reported, not judged (a harness that crashed after fixing the bug is still paid for the fix)."""
    return end_harness(episode, harness, run_harness(episode, model, harness, seed))
