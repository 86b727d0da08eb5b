"""The model gateway of one episode: OpenAI's chat completions, served inside one sandbox only, recorded.

A harness (an agent program running in the sandbox) is pointed at ``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1``.
That address is the sandbox's own loopback: the host listens there through envs/sandbox/listen.py, so the
sandbox reaches the gateway and nothing else, and nothing but this sandbox reaches the gateway. Each call is
answered by a :class:`~swebox.envs.gateway.calls.ChatModel` and kept as a :class:`CallRecord`, the exact token
ids the model saw and sampled. Calls are answered one at a time, in arrival order, so that the records and
the per-call seeds follow the harness's own order.

Endpoints: ``POST /v1/chat/completions`` (``stream`` true or false) and ``GET /v1/models``. Errors use
OpenAI's body (``{"error": {"message", "type", "code"}}``); a call past a limit is HTTP 403, which OpenAI
clients do not retry.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from typing import Any

from swebox.envs.gateway.calls import (
    BadRequest,
    CallRecord,
    ChatModel,
    Completion,
    GatewayLimits,
    OverLimit,
    request_fields,
)
from swebox.envs.sandbox.listen import listen_inside

MODEL_NAME = "swebox-policy"
MAX_BODY_BYTES = 16 * 1024 * 1024


class GatewayRefusal(Exception):
    """A call the gateway answers with an HTTP error."""

    def __init__(self, status: int, kind: str, message: str, limit: str = "") -> None:
        super().__init__(message)
        self.status, self.kind, self.limit = status, kind, limit
        """``limit``: the GatewayLimits field that refused the call ('' for any other error)."""


class Gateway:
    """One episode's gateway: serve with :meth:`serve_inside`, read :attr:`records`, then :meth:`close`."""

    def __init__(self, model: ChatModel, limits: GatewayLimits | None = None, seed: int | None = None) -> None:
        """``seed``: the call with index i samples with seed + i (None: the model's own randomness)."""
        self.model = model
        self.limits = limits or GatewayLimits()
        self.seed = seed
        self.records: list[CallRecord] = []
        self.tokens_used = 0
        self.port = 0
        self.started_at = time.time()
        """Wall-clock time (time.time) when serving began: a record's ``started_s`` counts from it."""
        self._started = time.monotonic()
        self._answering = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL as the sandbox sees it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def serve_inside(self, sandbox_pid: int, port: int = 0) -> str:
        """Start serving on the loopback of the sandbox whose nsinit is ``sandbox_pid``; returns the base URL."""
        if self._server is not None:
            raise RuntimeError("Gateway.serve_inside(): already serving; one gateway serves one sandbox")
        sock = listen_inside(sandbox_pid, port)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self), bind_and_activate=False)
        server.socket.close()  # made in the host's namespace by the constructor; never bound
        server.socket, server.server_address = sock, sock.getsockname()
        server.daemon_threads = True
        self._server, self.port = server, sock.getsockname()[1]
        self._started, self.started_at = time.monotonic(), time.time()
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"swebox-gateway-{sandbox_pid}",
            daemon=True,
        )
        self._thread.start()
        return self.base_url

    def close(self) -> None:
        """Stop serving; safe to call twice. The records stay."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one call ---------------------------------------------------------------------------------------
    def answer(self, body: Any) -> Completion:
        """Answer one chat completions request body (parsed JSON), within the limits; records the call."""
        with self._answering:
            arrived = time.monotonic() - self._started
            index = len(self.records)
            messages = body.get("messages") if isinstance(body, dict) else None
            request = request_fields(body) if isinstance(body, dict) else {}
            try:
                max_tokens = self._budget(body, messages)
            except GatewayRefusal as refusal:
                listed = messages if isinstance(messages, list) else []
                self._refused(index, listed, arrived, 0.0, f"{refusal.kind}: {refusal}", request, refusal.limit)
                raise
            assert isinstance(messages, list)  # _budget refused any other body
            seed = body.get("seed") if isinstance(body.get("seed"), int) else None
            if seed is None and self.seed is not None:
                seed = self.seed + index
            t0 = time.monotonic()
            try:
                completion = self.model.complete(messages, max_tokens, seed, request)
            except OverLimit as exc:
                self._refused(
                    index, messages, arrived, time.monotonic() - t0, f"limit_exceeded: {exc}", request, exc.limit
                )
                raise GatewayRefusal(403, "limit_exceeded", str(exc), exc.limit) from exc
            except BadRequest as exc:
                self._refused(index, messages, arrived, time.monotonic() - t0, f"invalid_request_error: {exc}", request)
                raise GatewayRefusal(400, "invalid_request_error", str(exc)) from exc
            except Exception as exc:
                what = f"{type(exc).__name__}: {exc}"
                self._refused(index, messages, arrived, time.monotonic() - t0, f"model_error: {what}", request)
                raise GatewayRefusal(500, "model_error", f"the model failed: {what}") from exc
            self.tokens_used += len(completion.token_ids)
            self.records.append(CallRecord(index, messages, completion, arrived, time.monotonic() - t0, "", request))
            return completion

    def _refused(
        self, index: int, messages: list, arrived: float, seconds: float, error: str, request: dict, limit: str = ""
    ) -> None:
        """Record a call that got no completion (``error`` says why; ``limit``: the limit that refused it)."""
        self.records.append(CallRecord(index, messages, None, arrived, seconds, error, request, limit))

    def _budget(self, body: Any, messages: Any) -> int:
        if (
            not isinstance(body, dict)
            or not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
        ):
            raise GatewayRefusal(
                400,
                "invalid_request_error",
                "expected a JSON object with 'messages': a non-empty list of {role, content}",
            )
        limits = self.limits
        if len(self.records) >= limits.max_calls:
            raise GatewayRefusal(
                403, "limit_exceeded", f"the episode's {limits.max_calls} model calls are used up", "max_calls"
            )
        left = limits.max_tokens - self.tokens_used
        if left <= 0:
            raise GatewayRefusal(
                403, "limit_exceeded", f"the episode's {limits.max_tokens} tokens are used up", "max_tokens"
            )
        if time.monotonic() - self._started >= limits.wall_s:
            raise GatewayRefusal(403, "limit_exceeded", f"the episode's {limits.wall_s:g} s are up", "wall_s")
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool) or asked < 1):
            raise GatewayRefusal(
                400, "invalid_request_error", f"max_tokens: expected a whole number >= 1, found {asked!r}"
            )
        return min(asked, left) if asked is not None else left


def _handler(gateway: Gateway) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "swebox-gateway"

        def log_message(self, format: str, *args: Any) -> None:  # the records are the log
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "swebox"}],
                    },
                )
            else:
                self._error(GatewayRefusal(404, "not_found", f"no such endpoint: GET {self.path}"))

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._error(GatewayRefusal(404, "not_found", f"no such endpoint: POST {self.path}"))
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY_BYTES:
                    raise GatewayRefusal(
                        400,
                        "invalid_request_error",
                        f"expected a JSON body of 1 to {MAX_BODY_BYTES} bytes, found {length}",
                    )
                try:
                    body = json.loads(self.rfile.read(length))
                except (ValueError, UnicodeDecodeError) as exc:
                    raise GatewayRefusal(400, "invalid_request_error", f"the body is not JSON: {exc}") from exc
                completion = gateway.answer(body)
            except GatewayRefusal as refusal:
                self._error(refusal)
                return
            if body.get("stream"):
                self._stream(completion)
            else:
                self._json(200, response_body(completion, chunk=False))

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, refusal: GatewayRefusal) -> None:
            self._json(
                refusal.status,
                {"error": {"message": str(refusal), "type": refusal.kind, "code": refusal.kind, "param": None}},
            )

        def _stream(self, completion: Completion) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for event in (response_body(completion, chunk=True), "[DONE]"):
                data = event if isinstance(event, str) else json.dumps(event)
                self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

    return Handler


def response_body(completion: Completion, chunk: bool) -> dict[str, Any]:
    """OpenAI's chat.completion (or, streamed, one chat.completion.chunk holding the whole reply)."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:  # a streamed delta numbers its tool calls
        message["content"] = completion.text or None
        message["tool_calls"] = [{**c, "index": i} if chunk else c for i, c in enumerate(completion.tool_calls)]
    choice: dict[str, Any] = {"index": 0, "finish_reason": completion.finish_reason, "logprobs": None}
    choice["delta" if chunk else "message"] = message
    usage = {
        "prompt_tokens": len(completion.prompt_ids),
        "completion_tokens": len(completion.token_ids),
        "total_tokens": len(completion.prompt_ids) + len(completion.token_ids),
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk" if chunk else "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [choice],
        "usage": usage,
    }
