"""The policy answers tool-calling harnesses: a chat completions request with ``tools`` sent from inside a real
sandbox through the real gateway reaches the policy (PolicyModel) with the tools in its chat template, and a
reply written as Hermes ``<tool_call>`` blocks goes back as OpenAI ``tool_calls`` that the ``openai`` client
parses, while the record keeps the sampled ids exactly; a malformed call goes back as text, with the reason
recorded. The calls merge into one trajectory and every call of a reply is a turn action."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from swebox.envs.gateway import Gateway
from swebox.envs.gateway.tool_text import template_messages
from swebox.envs.gateway.turns import turn_records
from swebox.trainers.policy.generation import Generated
from swebox.trainers.policy.models import build_builtin_tokenizer
from swebox.trainers.rl.harness_rollout import PolicyModel, trajectory_of
from swebox.trainers.rl.rollout import encode, render

from tests.calc import GOLD
from tests.envs.gateway.chat_client import BASH, CHAT, talk
from tests.envs.gateway.tool_script import apply

TOK = build_builtin_tokenizer()
# two calls exactly as the template writes them, so that the merged sequence can be checked byte for byte
CALLS = (
    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "bash", "arguments": {"command": "cat calc/ops.py"}}\n</tool_call>'
)
MALFORMED = '<tool_call>\n{"name": "bash", "arguments": {"command": "git diff"\n</tool_call>'


class Fixed:
    """Samples the ids of each text in turn (then the end of turn), logprob -0.5 each."""

    def __init__(self, *texts: str, tok=TOK) -> None:
        self.texts, self.tok = list(texts), tok

    def generate(self, prompts, max_new_tokens, seeds=None):
        ids = [*encode(self.tok, self.texts.pop(0)), self.tok.eos_token_id]
        return [Generated(ids, [-0.5] * len(ids), "stop")]


def converse(sandbox, model, calls: int, max_tokens: int = 64, **fields) -> tuple[Gateway, list[tuple[int, str]]]:
    with Gateway(model, seed=3) as gateway:
        answers = talk(sandbox, gateway, {"tools": [BASH], "max_tokens": max_tokens, **fields}, calls)
    return gateway, answers


def openai_parse(answer: str, status: int = 200):
    """``answer`` (the bytes the sandbox's client got) through the real openai client's request path."""
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=answer.encode()))
    client = openai.OpenAI(
        base_url="http://gateway/v1", api_key="x", http_client=httpx.Client(transport=transport), max_retries=0
    )
    return client.chat.completions.create(model="swebox-policy", messages=CHAT, tools=[BASH])


def test_the_tiny_policy_sees_the_tools_in_its_prompt_through_the_real_gateway(sandbox):
    from swebox.trainers.policy.backends import TransformersBackend
    from swebox.trainers.policy.models import build_model
    from swebox.trainers.run.config import load_config

    from tests.trainers.tiny_run import SMALL

    cfg = load_config(None, SMALL)
    backend = TransformersBackend(build_model(cfg.model, TOK), TOK, cfg.generation)
    gateway, [(status, answer)] = converse(sandbox, PolicyModel(backend, TOK, 8, 4096), calls=1, max_tokens=8)
    assert status == 200, answer
    (record,) = gateway.records
    completion = record.completion
    prompt = TOK.decode(completion.prompt_ids)
    assert json.dumps(BASH) in prompt and "<tool_call>" in prompt and record.request["tools"] == [BASH]
    # the record alone (messages, request's tools, template) re-renders the ids the model saw
    TOK.chat_template = completion.template
    again = render(TOK, template_messages(record.messages), add_generation_prompt=True, tools=record.request["tools"])
    assert encode(TOK, again) == completion.prompt_ids
    assert 1 <= len(completion.token_ids) <= 8 and len(completion.logprobs) == len(completion.token_ids)
    message = openai_parse(answer).choices[0].message
    if completion.tool_calls:  # a random tiny model writing a well-formed call: possible, not expected
        assert len(message.tool_calls) == len(completion.tool_calls)
    else:
        assert message.content == TOK.decode(completion.token_ids, skip_special_tokens=True) == completion.text


def test_a_tool_call_reply_goes_back_as_openai_tool_calls_and_a_malformed_one_as_text(sandbox):
    gateway, [(status, answer), (status2, answer2)] = converse(
        sandbox, PolicyModel(Fixed(CALLS, MALFORMED), TOK, 64, 4096), calls=2
    )
    assert status == status2 == 200
    first, second = gateway.records
    parsed = openai_parse(answer)
    calls = parsed.choices[0].message.tool_calls
    assert parsed.choices[0].finish_reason == "tool_calls" and parsed.choices[0].message.content is None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("bash", {"command": "ls"}),
        ("bash", {"command": "cat calc/ops.py"}),
    ]
    assert [c.id for c in calls] == [c["id"] for c in first.completion.tool_calls] and calls[0].id != calls[1].id
    # the recorded ids are the sampled ones, whatever the parse made of them
    assert first.completion.token_ids == [*encode(TOK, CALLS), TOK.eos_token_id]
    assert first.completion.parse_error == ""
    # the tool results came back in the next prompt, as the template writes them
    assert "<tool_response>\nran {\"command\": \"ls\"}\n</tool_response>" in TOK.decode(second.completion.prompt_ids)

    reply = openai_parse(answer2).choices[0]
    assert reply.finish_reason == "stop" and reply.message.content == MALFORMED and not reply.message.tool_calls
    assert "tool call 0 is not JSON" in second.completion.parse_error
    assert second.completion.token_ids == [*encode(TOK, MALFORMED), TOK.eos_token_id]

    # one trajectory: the whole sequence is the last prompt and the last reply, the sampled ids trained on
    traj, unmerged = trajectory_of(gateway.records, TOK, "t", "g")
    assert unmerged == 0 and traj.num_turns == 2
    assert traj.prompt_ids + traj.response_ids == second.completion.prompt_ids + second.completion.token_ids
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    assert sampled == first.completion.token_ids + second.completion.token_ids

    # every call of the reply is a turn action with its own result; ``action`` stays the first (older readers)
    turns = turn_records(gateway.records)
    assert [c["arguments"]["command"] for c in turns[0]["tool_calls"]] == ["ls", "cat calc/ops.py"]
    assert [c["observation"] for c in turns[0]["tool_calls"]] == [
        'ran {"command": "ls"}',
        'ran {"command": "cat calc/ops.py"}',
    ]
    assert turns[0]["action"]["arguments"] == {"command": "ls"}
    assert "tool_calls" not in turns[1] and turns[1]["action"] is None  # a malformed call is no action


def test_without_tools_or_with_tool_choice_none_the_reply_is_text():
    for request in ({}, {"tools": [BASH], "tool_choice": "none"}):
        out = PolicyModel(Fixed(CALLS), TOK, 64, 4096).complete(CHAT, None, None, request)
        assert out.text == CALLS and out.tool_calls == [] and out.finish_reason == "stop"
        assert "<tools>" not in TOK.decode(out.prompt_ids)


def marked_tokenizer():
    """The builtin tokenizer with Llama's ``<|python_tag|>`` and Mistral's ``[TOOL_CALLS]`` as special tokens, as
    their own tokenizers have them: decoding the content drops them, so the parser must read them from the ids."""
    import copy

    tok = copy.deepcopy(TOK)
    tok.add_special_tokens({"additional_special_tokens": ["<|python_tag|>", "[TOOL_CALLS]"]})
    return tok


# per format: a reply with two calls, one with a malformed call, and a check of the ids the format gives calls
FORMATS = {
    "llama3_json": (
        '<|python_tag|>{"name": "bash", "parameters": {"command": "ls"}}; '
        '{"name": "bash", "parameters": {"command": "cat calc/ops.py"}}',
        '<|python_tag|>{"name": "bash", "parameters": {"command": "git diff"}',
        r"call_[0-9a-f]{12}_\d",
    ),
    "mistral": (
        '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}}, '
        '{"name": "bash", "arguments": {"command": "cat calc/ops.py"}}]',
        '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "git diff"}',
        r"[A-Za-z0-9]{9}",
    ),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_llama3_and_mistral_calls_go_back_as_openai_tool_calls_through_the_real_gateway(sandbox, fmt):
    import re

    tok = marked_tokenizer()
    good, malformed, id_shape = FORMATS[fmt]
    model = PolicyModel(Fixed(good, malformed, tok=tok), tok, 64, 4096, tool_call_parser=fmt)
    gateway, [(status, answer), (status2, answer2)] = converse(sandbox, model, calls=2)
    assert status == status2 == 200, (answer, answer2)
    first, second = gateway.records
    choice = openai_parse(answer).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("bash", {"command": "ls"}),
        ("bash", {"command": "cat calc/ops.py"}),
    ]
    assert all(re.fullmatch(id_shape, c.id) for c in calls) and calls[0].id != calls[1].id
    # the sampled ids stay as sampled (the marker a special token among them), whatever the parse made of them
    assert first.completion.token_ids == [*encode(tok, good), tok.eos_token_id] and first.completion.parse_error == ""
    assert "<tool_response>\nran {\"command\": \"ls\"}\n</tool_response>" in tok.decode(second.completion.prompt_ids)

    reply = openai_parse(answer2).choices[0]
    plain = tok.decode(second.completion.token_ids, skip_special_tokens=True)  # the content, markers dropped
    assert "[TOOL_CALLS]" not in plain and "<|python_tag|>" not in plain
    assert reply.finish_reason == "stop" and not reply.message.tool_calls and reply.message.content == plain
    assert "not JSON" in second.completion.parse_error and second.completion.text == plain
    assert second.completion.token_ids == [*encode(tok, malformed), tok.eos_token_id]

    traj, unmerged = trajectory_of(gateway.records, tok, "t", "g")  # the calls merge as Hermes ones do
    assert unmerged == 0 and traj.num_turns == 2
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    assert sampled == first.completion.token_ids + second.completion.token_ids


@pytest.mark.parametrize("fmt", ["hermes", "mistral"])
def test_with_tool_choice_none_a_reply_holding_a_call_block_stays_plain_content(sandbox, fmt):
    tok = marked_tokenizer()
    written = CALLS if fmt == "hermes" else FORMATS[fmt][0]
    model = PolicyModel(Fixed(written, tok=tok), tok, 64, 4096, tool_call_parser=fmt)
    gateway, [(status, answer)] = converse(sandbox, model, calls=1, tool_choice="none")
    assert status == 200, answer
    choice = openai_parse(answer).choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == tok.decode([*encode(tok, written)], skip_special_tokens=True)
    (record,) = gateway.records
    assert record.completion.tool_calls == [] and record.completion.parse_error == ""
    assert "<tools>" not in tok.decode(record.completion.prompt_ids)  # the model was not offered the tools


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "bash"}}])
def test_a_tool_choice_the_policy_cannot_enforce_gets_a_clear_400_not_silence(sandbox, choice):
    """The policy samples freely: forcing a call would need constrained sampling or a prefilled turn (tokens the
    trainer must never count as sampled), so the harness is told, and nothing is sampled."""
    model = PolicyModel(Fixed("never sampled"), TOK, 64, 4096)
    gateway, [(status, answer)] = converse(sandbox, model, calls=1, tool_choice=choice)
    assert status == 400, answer
    with pytest.raises(openai.BadRequestError) as refused:
        openai_parse(answer, status)
    message = refused.value.body["message"]
    assert "expected 'auto' or 'none'" in message and f"found {json.dumps(choice)}" in message
    assert "openai: model" in message and refused.value.body["type"] == "invalid_request_error"
    (record,) = gateway.records
    assert record.completion is None and record.error.startswith("invalid_request_error")
    assert record.request["tool_choice"] == choice and model.backend.texts == ["never sampled"]


def test_a_template_without_a_tools_branch_is_refused_with_a_clear_error_not_silently_ignored(sandbox):
    """A pretrained template that has no tools branch would drop the request's tools (the model never sees
    them): the harness gets the gateway's model error saying so, and a request without tools is still answered."""
    import copy

    plain = copy.deepcopy(TOK)
    plain.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    model = PolicyModel(Fixed("fine"), plain, 64, 4096)
    assert not model.renders_tools() and PolicyModel(Fixed(), TOK, 64, 4096).renders_tools()
    gateway, answers = converse(sandbox, model, calls=1)
    ((status, answer),) = answers
    assert status == 500 and "expected the policy's chat template to render them" in answer, answer
    assert "found a template without a tools branch" in answer, answer
    assert gateway.records[0].completion is None and "model_error" in gateway.records[0].error
    assert model.complete(CHAT, None, None, {}).text == "fine"


def hermes(*commands: str) -> str:
    """One reply calling ``bash`` once per command, as the template writes calls."""
    return "\n".join(
        f'<tool_call>\n{{"name": "bash", "arguments": {json.dumps({"command": c})}}}\n</tool_call>' for c in commands
    )


@pytest.mark.parametrize(
    "first, resolved",
    [
        (hermes(apply(GOLD), "cd /testbed && grep -n 'return a' calc/ops.py"), True),
        (hermes(apply(GOLD.replace("+    return a + b", "+    return a * b"))), False),
        ('<tool_call>\n{"name": "bash", "arguments": {"command": "cd /testbed &&', False),  # cut: not a call
    ],
)
def test_a_tool_calling_harness_played_by_the_policy_is_graded_and_becomes_one_trajectory(
    calc_layer, tiny_agent_install, first, resolved
):
    """The tiny agent in its OpenAI tool-calling mode, in a real sandbox on the calc task: the policy's first
    reply holds its tool calls (or a malformed one), its second none ("Done.": the agent stops)."""
    from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
    from swebox.envs.episodes.episode_state import StartState
    from swebox.envs.gateway.harness import HarnessConfig, episode_config
    from swebox.trainers.rl.harness_rollout import play_harness_episode

    from tests.calc import calc_task

    agent = f"command:TINY_AGENT_TOOLS=1 python3 {tiny_agent_install}/tiny_agent.py"
    harness = HarnessConfig(harness=agent, install=tiny_agent_install)
    episode = SWEEpisode(
        calc_task(), StartState([calc_layer], [calc_layer]), episode_config(EpisodeConfig(time_limit_s=300), harness)
    )
    model = PolicyModel(Fixed(first, "Done."), TOK, 512, 4096)
    try:
        traj = play_harness_episode(episode, model, TOK, harness, "calc", "calc", seed=1)
    finally:
        episode.close()
    assert not traj.failed, traj.error
    assert traj.reward == (1.0 if resolved else 0.0) and traj.grade["resolved"] is resolved
    called = traj.turns[0].get("tool_calls") or []
    assert len(called) == first.count("</tool_call>")  # every call of the reply ran and is in the turn record
    if resolved:
        assert called[0]["observation"].startswith("<returncode>0</returncode>")
        assert "2:    return a + b" in called[1]["observation"]  # the second call saw the first one's fix
    if not called:
        assert "without its </tool_call>" in traj.turns[0]["parse_error"] and traj.num_turns == 1
    # the calls merged: the sampled ids trained on, exactly as sampled, the tool results not
    assert traj.metrics["gateway/unmerged_calls"] == 0.0
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    replies = [first, "Done."][: traj.num_turns]
    assert sampled == [i for text in replies for i in [*encode(TOK, text), TOK.eos_token_id]]
