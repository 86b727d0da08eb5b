"""The model gateway: OpenAI's chat completions inside one sandbox only, its limits, and what it records."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading

import pytest
from swebox.envs.gateway import Completion, Gateway, GatewayLimits, OverLimit
from swebox.envs.sandbox import Sandbox, SandboxPolicy

from tests.envs.gateway.chat_client import POST

USER = [{"role": "user", "content": "fix it"}]


class Echo:
    """Replies 'echo <seed> <last message>' with two token ids per call."""

    def __init__(self) -> None:
        self.asked: list[int | None] = []

    def complete(self, messages, max_tokens, seed, request):
        self.asked.append(max_tokens)
        return Completion(
            text=f"echo {seed} {messages[-1]['content']}", prompt_ids=[1, 2, 3], token_ids=[7, 8], logprobs=[-0.1, -0.2]
        )


def test_calls_are_recorded_in_order_with_their_seeds_and_ids():
    gateway = Gateway(Echo(), seed=100)
    first = gateway.answer({"messages": USER})
    second = gateway.answer({"messages": [*USER, {"role": "assistant", "content": first.text}], "seed": 5})
    assert (first.text, second.text) == ("echo 100 fix it", "echo 5 echo 100 fix it")
    assert [r.index for r in gateway.records] == [0, 1] and gateway.tokens_used == 4
    assert gateway.records[0].completion.token_ids == [7, 8] and gateway.records[0].messages == USER
    assert json.loads(json.dumps(gateway.records[1].to_dict()))["completion"]["logprobs"] == [-0.1, -0.2]


@pytest.mark.parametrize(
    "limits, calls, why",
    [
        (GatewayLimits(max_calls=2), 2, "model calls are used up"),
        (GatewayLimits(max_tokens=3), 2, "tokens are used up"),  # 2 + 2 tokens: the second call ends the budget
    ],
)
def test_a_call_past_a_limit_is_refused_with_403_and_recorded(limits, calls, why):
    from swebox.envs.gateway.server import GatewayRefusal

    gateway = Gateway(Echo(), limits)
    for _ in range(calls):
        gateway.answer({"messages": USER})
    with pytest.raises(GatewayRefusal, match=why) as refused:
        gateway.answer({"messages": USER})
    assert (refused.value.status, refused.value.kind) == (403, "limit_exceeded")
    assert gateway.records[-1].completion is None and "limit_exceeded" in gateway.records[-1].error


def test_a_call_asks_for_at_most_the_tokens_left():
    model = Echo()
    gateway = Gateway(model, GatewayLimits(max_tokens=5))
    gateway.answer({"messages": USER, "max_tokens": 100})
    gateway.answer({"messages": USER})
    assert model.asked == [5, 3]


@pytest.mark.parametrize(
    "body, why",
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": ["hi"]}, "messages"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": "9"}, "max_tokens"),
    ],
)
def test_malformed_requests_are_400(body, why):
    from swebox.envs.gateway.server import GatewayRefusal

    with pytest.raises(GatewayRefusal, match=why) as refused:
        Gateway(Echo()).answer(body)
    assert refused.value.status == 400


def test_a_model_over_its_own_bound_is_a_limit_and_a_crash_is_a_500():
    from swebox.envs.gateway.server import GatewayRefusal

    class Full:
        def complete(self, messages, max_tokens, seed, request):
            raise OverLimit("the prompt fills the context")

    class Broken:
        def complete(self, messages, max_tokens, seed, request):
            raise RuntimeError("CUDA fell over")

    for model, status in ((Full(), 403), (Broken(), 500)):
        gateway = Gateway(model)
        with pytest.raises(GatewayRefusal) as refused:
            gateway.answer({"messages": USER})
        assert refused.value.status == status and gateway.records[0].completion is None


@pytest.mark.parametrize("bad", [{"max_calls": 0}, {"max_tokens": 1.5}, {"wall_s": 0}])
def test_limits_say_what_they_expected(bad):
    with pytest.raises(ValueError, match="GatewayLimits"):
        GatewayLimits(**bad)


# ------------------------------------------------------------------------------------- in real sandboxes

CLIENT = (
    POST
    + """print(json.dumps([post({{'messages': [{{'role': 'user', 'content': 'one'}}]}}),
                  post({{'messages': [{{'role': 'user', 'content': 'two'}}], 'stream': True}}),
                  post({{'messages': [{{'role': 'user', 'content': 'three'}}]}})]))
EOF"""
)

CONNECT = """python3 - <<'EOF'
import socket
for address in {targets!r}:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(tuple(address)); print(address, 'CONNECTED')
    except OSError as exc:
        print(address, 'failed', type(exc).__name__)
EOF"""


@pytest.fixture
def two_sandboxes():
    root = tempfile.mkdtemp(prefix="swebox-test-", dir="/tmp")
    layer = tempfile.mkdtemp(prefix="swebox-test-layer-", dir="/tmp")
    os.chmod(root, 0o711)
    os.chmod(layer, 0o755)
    policy = SandboxPolicy(work_root=root, command_timeout_s=60)
    with Sandbox([layer], policy) as one, Sandbox([layer], policy) as other:
        yield one, other
    os.rmdir(layer)
    os.rmdir(root)


@pytest.fixture
def host_server():
    """A TCP server on the host's loopback that answers anyone."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_the_sandbox_reaches_the_gateway_and_nothing_else_and_only_it_reaches_the_gateway(two_sandboxes, host_server):
    one, other = two_sandboxes
    with Gateway(Echo(), GatewayLimits(max_calls=2), seed=1) as gateway:
        url = gateway.serve_inside(one.pid)
        result = one.exec(CLIENT.format(url=url), timeout=60)
        assert result.exit_code == 0, result.output
        (ok, answer), (streamed, events), (refused, error) = json.loads(result.output.strip().splitlines()[-1])
        assert ok == 200 and json.loads(answer)["choices"][0]["message"]["content"] == "echo 1 one"
        assert json.loads(answer)["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        chunks = [line[len("data: ") :] for line in events.splitlines() if line.startswith("data: ")]
        assert streamed == 200 and chunks[-1] == "[DONE]"
        assert json.loads(chunks[0])["choices"][0]["delta"]["content"] == "echo 2 two"
        assert refused == 403 and json.loads(error)["error"]["type"] == "limit_exceeded"
        assert [r.completion is not None for r in gateway.records] == [True, True, False]

        # from the sandbox: the host's own loopback server and the outside world are out of reach
        probe = one.exec(
            CONNECT.format(targets=[("127.0.0.1", host_server), ("192.0.2.1", 80), ("127.0.0.1", gateway.port)]),
            timeout=60,
        ).output
        assert f"('127.0.0.1', {host_server}) failed" in probe and "('192.0.2.1', 80) failed" in probe
        assert f"('127.0.0.1', {gateway.port}) CONNECTED" in probe
        # to the gateway: neither another sandbox nor the host
        assert (
            f"('127.0.0.1', {gateway.port}) failed"
            in other.exec(CONNECT.format(targets=[("127.0.0.1", gateway.port)]), timeout=60).output
        )
        with socket.socket() as host_side, pytest.raises(OSError):
            host_side.settimeout(3)
            host_side.connect(("127.0.0.1", gateway.port))
    assert len(gateway.records) == 3  # kept after close


def test_serving_needs_a_running_sandbox():
    from swebox.envs.sandbox import SandboxError

    with pytest.raises(SandboxError, match="running sandbox"):
        Gateway(Echo()).serve_inside(0)


def test_the_overhead_benchmark_runs_and_reports_a_table(capsys):
    import argparse

    from swebox.scripts import bench_gateway

    assert bench_gateway.run(argparse.Namespace(calls=5, prompt_chars=100)) == 0
    header, _, row = capsys.readouterr().out.strip().splitlines()
    assert header.startswith("| calls |") and row.startswith("| 5 | 100 |")
    with pytest.raises(SystemExit, match="--calls >= 1"):
        bench_gateway.run(argparse.Namespace(calls=0, prompt_chars=100))


def test_a_tool_call_reply_is_returned_in_openai_s_format_and_its_request_recorded():
    from swebox.envs.gateway.server import response_body

    call = {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}

    class Tools:
        def complete(self, messages, max_tokens, seed, request):
            return Completion(text="", tool_calls=[call], finish_reason="tool_calls")

    gateway = Gateway(Tools())
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    body = {"model": "x", "stream": False, "messages": USER, "tools": tools, "max_tokens": 9, "temperature": 0.5}
    completion = gateway.answer(body)
    (record,) = gateway.records
    assert record.request == {"tools": tools, "max_tokens": 9, "temperature": 0.5}  # model and stream left out
    whole = response_body(completion, chunk=False)["choices"][0]
    assert whole["message"] == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert whole["finish_reason"] == "tool_calls"
    assert response_body(completion, chunk=True)["choices"][0]["delta"]["tool_calls"] == [{**call, "index": 0}]
    with pytest.raises(ValueError, match="expected {id, type: 'function'"):
        Completion(text="", tool_calls=[{"id": "c", "function": {"name": "bash"}}])


def test_a_refused_call_records_the_limit_that_refused_it():
    gateway = Gateway(Echo(), GatewayLimits(max_calls=1))
    gateway.answer({"messages": USER})
    with pytest.raises(Exception, match="model calls are used up"):
        gateway.answer({"messages": USER})
    assert [r.limit for r in gateway.records] == ["", "max_calls"]


def test_a_replay_refuses_a_call_whose_request_fields_differ_and_names_the_field():
    from swebox.envs.gateway.calls import CallRecord
    from swebox.envs.gateway.replay import ReplayDiverged, ReplayModel

    answer = Completion(text="```bash\nls\n```")
    parent = [CallRecord(0, USER, answer, 0.0, 0.1, request={"max_tokens": 100, "tools": []})]
    same = ReplayModel(parent, Echo())
    assert same.complete(USER, 100, None, {"tools": [], "max_tokens": 100}) is answer  # key order does not matter
    for request, why in (
        ({"max_tokens": 200, "tools": []}, "call 0: request field 'max_tokens' differs: expected 100, found 200"),
        ({"max_tokens": 100}, "call 0: request field 'tools' differs: expected [], found absent"),
        ({"max_tokens": 100, "tools": [], "top_p": 0.9}, "call 0: request field 'top_p' differs: expected absent"),
    ):
        replay = ReplayModel(parent, Echo())
        with pytest.raises(ReplayDiverged):
            replay.complete(USER, 100, None, request)
        assert replay.diverged.startswith(why) and not replay.finished_replay()
