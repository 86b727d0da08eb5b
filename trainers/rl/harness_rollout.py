"""Harness episodes as trajectories: the policy answers the gateway's calls, and the calls become the sequence
the learner trains on.

:class:`PolicyModel` is the gateway's :class:`~swebox.envs.gateway.calls.ChatModel` for the policy: the chat
template turns the harness's messages (and the request's ``tools``) into prompt ids, the generation backend samples,
and the record keeps the ids exactly as sampled; a reply's tool calls, written in the format
``generation.tool_call_parser`` names (Hermes ``<tool_call>`` blocks, Llama 3 JSON, Mistral ``[TOOL_CALLS]``), go
back to the harness as OpenAI tool calls (envs/gateway/tool_parsers.py). :func:`trajectory_of` merges the calls
into one trajectory by prefix: call k extends call k-1 when its messages are call k-1's, then the assistant reply
as the model wrote it, then new messages (the harness's observation); the reply keeps its sampled ids (trained on,
loss mask 1) and only the new messages' rendering is encoded (loss mask 0), as in the text loop. A call that does
not extend the chain (a harness that rewrote or dropped earlier turns) starts nothing new: the chain ends at the
last call that extended it, and ``gateway/unmerged_calls`` counts the calls left out of the loss.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from swebox.envs.episodes.episode import SWEEpisode
from swebox.envs.gateway.calls import CallRecord, ChatModel, Completion, OverLimit
from swebox.envs.gateway.harness import HarnessConfig, play_harness, turn_records
from swebox.envs.gateway.tool_parsers import parse_reply
from swebox.envs.gateway.tool_text import check_tool_choice, template_messages, tools_of
from swebox.trainers.policy.backends import TOOL_FIELDS
from swebox.trainers.policy.generation import GenerationBackend
from swebox.trainers.rl.token_episode import Trajectory, encode, render


class PolicyModel:
    """The policy behind a generation backend, as the gateway's model."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: Any,
        max_new_tokens: int,
        max_context_tokens: int,
        tool_call_parser: str = "hermes",
    ) -> None:
        """``tool_call_parser``: the format the policy writes tool calls in (``generation.tool_call_parser``)."""
        self.backend, self.tokenizer = backend, tokenizer
        self.max_new_tokens, self.max_context_tokens = max_new_tokens, max_context_tokens
        self.tool_call_parser = tool_call_parser
        self._renders_tools: bool | None = None  # asked of the template on the first request with tools

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        check_tool_choice(request)  # "required" or a named function: HTTP 400, never silently ignored
        tools = tools_of(request)
        if tools is not None and not self.renders_tools():
            # the model would never see the tools and its calls could not be read: the harness is told (the
            # gateway answers a model error with HTTP 500 and this message) rather than left to wait for calls
            raise ValueError(
                f"the request offers {len(tools)} tools; expected the policy's chat template to render them "
                f"(apply_chat_template(tools=...)); found a template without a tools branch "
                f"({getattr(self.tokenizer, 'name_or_path', '') or 'this tokenizer'}). Use a tokenizer whose "
                "template renders tools (Qwen2.5's, the builtin one), or a harness that sends no tools."
            )
        prompt = encode(
            self.tokenizer, render(self.tokenizer, template_messages(messages), add_generation_prompt=True, tools=tools)
        )
        room = self.max_context_tokens - len(prompt)
        if room <= 0:
            raise OverLimit(
                f"the prompt is {len(prompt)} tokens; generation.max_context_tokens is {self.max_context_tokens}"
            )
        budget = min(self.max_new_tokens, room, max_tokens or self.max_new_tokens)
        out = self.backend.generate([prompt], budget, [seed] if seed is not None else None)[0]
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        completion = Completion(
            text=text,
            prompt_ids=prompt,
            token_ids=list(out.token_ids),
            logprobs=list(out.logprobs),
            finish_reason=out.finish_reason,
            template=self.tokenizer.chat_template or "",
        )
        # a reply cut short answers as text (OpenAI's "length"); the sampled ids stay as sampled either way
        if tools is not None and out.finish_reason == "stop":
            # Hermes' <tool_call> is plain text in Qwen's vocabulary: the content as decoded is read, so nothing
            # of the reply changes; the other formats start with a special token, which that decoding drops
            source = text if self.tool_call_parser == "hermes" else self._with_markers(out.token_ids)
            parsed = parse_reply(source, self.tool_call_parser)
            completion.parse_error = parsed.error
            if parsed.tool_calls:
                completion.text, completion.tool_calls = parsed.content, parsed.tool_calls
                completion.finish_reason = "tool_calls"
        return completion

    def _with_markers(self, token_ids: list[int]) -> str:
        """The reply decoded with its special tokens kept (``<|python_tag|>`` and ``[TOOL_CALLS]`` are special
        tokens, which the content's decoding drops) but without the end-of-turn token that stopped it."""
        ids = list(token_ids)
        if ids and ids[-1] in set(self.tokenizer.all_special_ids):
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def renders_tools(self) -> bool:
        """Whether the chat template writes a request's tools into the prompt (a template without a tools
        branch renders the same text with them and without)."""
        if self._renders_tools is None:
            chat = [{"role": "user", "content": "?"}]
            probe = [{"type": "function", "function": {"name": "swebox_probe", "parameters": {"type": "object"}}}]
            with_tools = render(self.tokenizer, chat, add_generation_prompt=True, tools=probe)
            self._renders_tools = "swebox_probe" in with_tools
        return self._renders_tools


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Role and text content only (a list of content parts is joined): what a text-only server is sent."""
    return [{"role": m["role"], "content": m["content"]} for m in template_messages(messages)]


def _said(completion: Completion) -> dict[str, Any]:
    """The assistant message a harness sends back for ``completion`` (as chat templates take it)."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["tool_calls"] = completion.tool_calls
    return template_messages([message])[0]


def trajectory_of(records: list[CallRecord], tokenizer: Any, task_id: str, group_id: str) -> tuple[Trajectory, int]:
    """The merged trajectory of a harness episode's calls, and how many answered calls did not extend it."""
    answered = [r for r in records if r.completion is not None]
    if not answered or tokenizer is None or not answered[0].completion.prompt_ids:  # a model without tokens
        return Trajectory(
            task_id, group_id, [], num_turns=len(answered), prompt=_plain(answered[0].messages) if answered else []
        ), len(answered)
    first = answered[0]
    tools = tools_of(first.request)
    traj = Trajectory(task_id, group_id, list(first.completion.prompt_ids), prompt=_plain(first.messages))
    history = template_messages(first.messages)
    merged, previous = 0, first.completion
    for record in answered:
        completion = record.completion
        if record is not first:
            messages = template_messages(record.messages)
            said = _said(previous)
            if (
                tools_of(record.request) != tools
                or messages[: len(history) + 1] != [*history, said]
                or len(messages) == len(history) + 1
            ):
                break
            before = render(tokenizer, [*history, said], add_generation_prompt=False, tools=tools)
            after = render(tokenizer, messages, add_generation_prompt=True, tools=tools)
            eos = tokenizer.eos_token
            end = before.rfind(eos)
            if not after.startswith(before) or end < 0:
                break
            delta = encode(tokenizer, before[end + len(eos) :] + after[len(before) :])
            if previous.finish_reason == "length":  # the sampled ids lack the end of turn the template writes
                delta = [int(tokenizer.eos_token_id), *delta]
            traj.response_ids += delta
            traj.loss_mask += [0] * len(delta)
            traj.old_logprobs += [0.0] * len(delta)
            history = messages
        traj.response_ids += completion.token_ids
        traj.loss_mask += [1] * len(completion.token_ids)
        traj.old_logprobs += completion.logprobs
        traj.num_turns += 1
        previous = completion
        merged += 1
    return traj, len(answered) - merged


def play_harness_episode(
    episode: SWEEpisode,
    model: ChatModel,
    tokenizer: Any,
    harness: HarnessConfig,
    task_id: str,
    group_id: str,
    seed: int | None,
) -> Trajectory:
    """One harness episode as a trajectory; never raises for an environment failure (the trajectory is failed
    and masked, as in the text loop)."""
    started, wall = time.monotonic(), time.time()
    intervals: list[tuple[str, float, float]] = []
    try:
        reward, info = play_harness(episode, model, harness, seed)
        at = info["harness"]["started_at"]
        intervals = [("generate", at + r["started_s"], at + r["started_s"] + r["seconds"]) for r in info["gateway"]]
        records = [
            CallRecord(**{**r, "completion": Completion(**r["completion"]) if r["completion"] else None})
            for r in info["gateway"]
        ]
        traj, unmerged = trajectory_of(records, tokenizer, task_id, group_id)
        traj.turns = turn_records(records, (info.get("audit") or {}).get("findings"))
        traj.reward = float(reward)
        if info.get("error"):
            traj.failed, traj.error = True, str(info["error"])
        traj.diff, traj.grade, traj.reason = str(info.get("diff") or ""), info.get("grade"), str(info["reason"])
        traj.audit, traj.provenance, traj.cost = info.get("audit"), info.get("provenance"), info.get("cost")
        metrics = {k: float(v) for k, v in (info.get("metrics") or {}).items() if isinstance(v, (int, float))}
        metrics["gateway/unmerged_calls"] = float(unmerged)
    except Exception as exc:  # the environment failed, not the policy: masked
        traj = Trajectory(
            task_id,
            group_id,
            [],
            failed=True,
            reward=0.0,
            error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}",
        )
        metrics = {"env/errors": 1.0}
    model_s = metrics.get("gateway/model_s", 0.0)
    traj.metrics = {
        **metrics,
        "timing/generate_s": model_s,
        "timing/env_s": max(0.0, time.monotonic() - started - model_s - metrics.get("env/grade_s", 0.0)),
        "timing/grade_s": metrics.get("env/grade_s", 0.0),
        "timing/episode_s": time.monotonic() - started,
    }
    # the calls are generation; the time around them (the harness's commands, its startup, grading) the env's
    edges = [wall, *(t for _, start, end in intervals for t in (start, end)), time.time()]
    gaps = [("env", edges[i], edges[i + 1]) for i in range(0, len(edges) - 1, 2) if edges[i + 1] > edges[i]]
    traj.intervals = [*gaps, *intervals]
    return traj


def harness_model(args: Any, cfg: Any, task: Any, backend: GenerationBackend | None, tokenizer: Any) -> ChatModel:
    """The gateway's model for ``swebox eval --policy ...`` with a harness: gold and giveup are scripted for
    mini-swe-agent's text format; hf: is the policy; openai: forwards to the served model,
    tools and tool calls included."""
    from swebox.envs.gateway.scripted import ScriptedModel, giveup_replies, gold_replies

    if args.policy == "gold":
        return ScriptedModel(gold_replies(task.patch), tokenizer)
    if args.policy in ("empty", "giveup"):
        return ScriptedModel(giveup_replies(), tokenizer)
    gen = cfg.generation
    if args.policy.startswith("hf:"):
        return PolicyModel(backend, tokenizer, gen.max_new_tokens, gen.max_context_tokens, gen.tool_call_parser)
    import dataclasses

    from swebox.trainers.policy.generation import OpenAIBackend

    served = OpenAIBackend(
        dataclasses.replace(
            gen, backend="openai", openai_base_url=args.policy[len("openai:") :], openai_model=args.model
        )
    )
    return ServedModel(served)


class ServedModel:
    """A served model behind an OpenAI-compatible server, as the gateway's model (no token ids: for evaluation).

    A function-calling harness works through it: the request's ``tools``, ``tool_choice`` and
    ``parallel_tool_calls`` go to the server as sent, so do the conversation's assistant ``tool_calls`` and
    ``tool`` messages, and the server's tool calls and finish reason come back in the :class:`Completion`."""

    def __init__(self, served: Any) -> None:
        self.served = served

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        fields = {key: request[key] for key in TOOL_FIELDS if key in request}
        reply = self.served.chat_reply(_served(messages), max_tokens, fields)
        return Completion(text=reply.text, tool_calls=reply.tool_calls, finish_reason=reply.finish_reason)


def _served(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a server is sent: role and text content (a list of parts joined, as before tools were passed on),
    and an assistant's ``tool_calls`` and a tool message's ``tool_call_id`` and ``name`` exactly as the harness
    sent them (the arguments stay JSON text, as OpenAI carries them)."""
    out = []
    for m, plain in zip(messages, _plain(messages), strict=True):
        message: dict[str, Any] = dict(plain)
        if plain["role"] == "assistant" and isinstance(m.get("tool_calls"), list) and m["tool_calls"]:
            message["tool_calls"] = m["tool_calls"]
        if plain["role"] == "tool":
            message.update({key: m[key] for key in ("tool_call_id", "name") if isinstance(m.get(key), str)})
        out.append(message)
    return out
