"""Generation backends: sampled ids with aligned logprobs, batching of concurrent callers, the OpenAI client."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from swebox.trainers.policy.generation import Generated, OpenAIBackend, RequestBatcher, make_backend
from swebox.trainers.policy.models import build_builtin_tokenizer, build_model
from swebox.trainers.run.config import GenerationConfig, ModelConfig


@pytest.fixture(scope="module")
def policy():
    tok = build_builtin_tokenizer()
    torch.manual_seed(0)
    return build_model(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2), tok), tok


def test_transformers_logprobs_match_a_fresh_forward_pass(policy):
    model, tok = policy
    backend = make_backend(GenerationConfig(max_context_tokens=128, max_new_tokens=6), model, tok)
    prompts = [tok.encode("hello world, a longer prompt", add_special_tokens=False), tok.encode("x")]
    outs = backend.generate(prompts, 6)
    for prompt, out in zip(prompts, outs, strict=True):  # the short prompt was left-padded in the batch
        assert 1 <= len(out.token_ids) <= 6 and len(out.logprobs) == len(out.token_ids)
        assert out.finish_reason == ("stop" if out.token_ids[-1] == tok.eos_token_id else "length")
        with torch.no_grad():
            logits = model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(expected, torch.tensor(out.logprobs), atol=1e-4)


def test_update_weights_makes_the_backend_sample_from_the_new_weights(policy):
    model, tok = policy
    import copy

    mine = copy.deepcopy(model)
    cfg = GenerationConfig(temperature=0.0, max_context_tokens=64, max_new_tokens=4)  # greedy: deterministic
    backend = make_backend(cfg, mine, tok)
    torch.manual_seed(1)
    other = build_model(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2), tok)
    reference = make_backend(cfg, other, tok)
    prompts = [[5, 6, 7], [9, 10]]
    assert [g.token_ids for g in backend.generate(prompts, 4)] != [g.token_ids for g in reference.generate(prompts, 4)]
    backend.update_weights(other.state_dict())
    assert [g.token_ids for g in backend.generate(prompts, 4)] == [g.token_ids for g in reference.generate(prompts, 4)]


def test_batcher_runs_concurrent_callers_together_and_cuts_each_to_its_limit():
    calls = []

    def run(prompts, max_new, seeds=None):
        calls.append((len(prompts), max_new))
        return [Generated([p[0]] * max_new, [0.0] * max_new, "length") for p in prompts]

    batcher = RequestBatcher(run, max_batch=8)
    gate = threading.Event()
    results = {}
    # a batch is running: the callers queue up behind it
    with batcher._state:
        batcher._running = True

    def call(i):
        gate.wait()
        results[i] = batcher.submit([[i]], i + 1)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    gate.set()
    import time

    # every caller has queued its request behind the running batch (a poll, not a guess at how long that takes
    # on a loaded machine: a caller that queued late would run a batch of its own)
    deadline = time.monotonic() + 60
    while True:
        with batcher._state:
            if len(batcher._pending) == 4:
                break
        assert time.monotonic() < deadline, "the four callers never queued"
        time.sleep(0.01)
    with batcher._state:
        batcher._running = False
        batcher._state.notify_all()
    for t in threads:
        t.join()
    assert calls == [(4, 4)]  # one engine call for all four, at the longest limit
    assert [len(results[i][0].token_ids) for i in range(4)] == [1, 2, 3, 4]
    assert results[2][0].token_ids == [2, 2, 2]


def _recording_batcher(max_batch: int, wait_s: float):
    """A RequestBatcher whose engine records each call's prompt count."""
    calls: list[int] = []

    def run(prompts, max_new, seeds=None):
        calls.append(len(prompts))
        return [Generated([p[0]], [0.0], "length") for p in prompts]

    return RequestBatcher(run, max_batch=max_batch, wait_s=wait_s), calls


def _submit_after(batcher, delays_s):
    """One thread per delay, each submitting one prompt after it; returns the threads, started."""
    import time

    def call(i, delay):
        time.sleep(delay)
        batcher.submit([[i]], 1)

    threads = [threading.Thread(target=call, args=(i, d), daemon=True) for i, d in enumerate(delays_s)]
    for t in threads:
        t.start()
    return threads


def _answered(threads, within_s: float = 120.0) -> bool:
    """Every caller got its answer before ``within_s`` (a deadline for a busy machine, far below the windows of
    an hour the tests set: answered at all means answered without waiting for the window)."""
    for t in threads:
        t.join(within_s)
    return not any(t.is_alive() for t in threads)


HOUR = 3600.0


def test_batcher_waits_for_the_callers_it_expects_and_no_longer():
    batcher, calls = _recording_batcher(max_batch=8, wait_s=HOUR)
    batcher.join(4)
    assert _answered(_submit_after(batcher, [0.0, 0.02, 0.04, 0.06]))  # a group's episodes, milliseconds apart
    assert calls == [4]  # one engine call when the fourth arrived, not fragments, not at the end of the window


def test_batcher_runs_a_full_batch_at_once_and_waits_at_most_its_window():
    import time

    batcher, calls = _recording_batcher(max_batch=2, wait_s=HOUR)
    assert _answered(_submit_after(batcher, [0.0, 0.02]))  # nobody joined: a full batch is reason enough
    assert calls == [2]

    batcher, calls = _recording_batcher(max_batch=8, wait_s=0.3)
    batcher.join(2)  # the second caller never asks (a long command, say): the first runs after the window
    started = time.monotonic()
    assert _answered(_submit_after(batcher, [0.0]))
    assert calls == [1] and time.monotonic() - started >= 0.3


def test_batcher_stops_waiting_for_a_caller_that_leaves():
    batcher, calls = _recording_batcher(max_batch=8, wait_s=HOUR)
    batcher.join(2)
    threads = _submit_after(batcher, [0.0])
    batcher.leave()  # the other episode ended: nobody else is coming
    assert _answered(threads)
    assert calls == [1]


def test_batcher_without_a_window_runs_whatever_is_pending():
    batcher, calls = _recording_batcher(max_batch=8, wait_s=0.0)
    batcher.join(3)
    assert batcher.submit([[1]], 1)[0].token_ids == [1]
    assert calls == [1]


def test_make_backend_refuses_a_transformers_backend_without_a_model():
    with pytest.raises(ValueError, match="expected a model and a tokenizer"):
        make_backend(GenerationConfig())


def test_vllm_backend_says_how_to_install_it():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"swebox\[vllm\]"):
            make_backend(GenerationConfig(backend="vllm"), model_path="/nonexistent", tokenizer=None)
    else:  # pragma: no cover - only on GPU machines
        pytest.skip("vllm is installed")


class _Server(BaseHTTPRequestHandler):
    seen: list = []
    failures: list = []  # statuses to answer before the next success (a busy or restarting server)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body, self.headers.get("Authorization")))
        if type(self).failures:
            status = type(self).failures.pop(0)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("retry-after-ms", "10")  # the client honours it: no seconds of backoff here
            data = json.dumps({"error": {"message": f"busy ({status})"}}).encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.endswith("/chat/completions"):
            reply = {
                "choices": [
                    {"message": {"content": "echo " + body["messages"][-1]["content"]}, "finish_reason": "stop"}
                ]
            }
        else:
            reply = {"choices": [{"text": "ab", "finish_reason": "length", "logprobs": {"token_logprobs": [-0.5]}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_backend_against_a_local_server(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("TEST_KEY", "sk-test")
        cfg = GenerationConfig(
            backend="openai",
            openai_base_url=f"http://127.0.0.1:{server.server_port}/v1",
            openai_model="m",
            openai_api_key_env="TEST_KEY",
            max_new_tokens=7,
            max_context_tokens=64,
        )
        tok = build_builtin_tokenizer()
        backend = make_backend(cfg, tokenizer=tok)
        assert isinstance(backend, OpenAIBackend)
        text, reason = backend.chat([{"role": "user", "content": "hi"}])
        assert (text, reason) == ("echo hi", "stop")
        path, body, auth = _Server.seen[-1]
        assert path == "/v1/chat/completions" and body["model"] == "m" and body["max_tokens"] == 7
        assert auth == "Bearer sk-test"
        out = backend.generate([tok.encode("q", add_special_tokens=False)], 3)[0]
        assert tok.decode(out.token_ids) == "ab" and out.finish_reason == "length"
        assert len(out.logprobs) == len(out.token_ids)  # server logprobs unaligned -> zeros, still aligned
        with pytest.raises(NotImplementedError, match="cannot receive weights"):
            backend.update_weights({})
        # a 503 and a 429 in a long evaluation are retried, not an errored task
        _Server.failures[:] = [503, 429]
        before = len(_Server.seen)
        assert backend.chat([{"role": "user", "content": "again"}]) == ("echo again", "stop")
        assert len(_Server.seen) - before == 3
        # a server that stays down: a clear error after the configured retries
        _Server.failures[:] = [503] * 10
        before = len(_Server.seen)
        with pytest.raises(RuntimeError, match=r"expected HTTP 200; found 503 after 5 retries"):  # the default
            backend.chat([{"role": "user", "content": "down"}])
        assert len(_Server.seen) - before == 6
        _Server.failures.clear()
    finally:
        server.shutdown()
        server.server_close()
