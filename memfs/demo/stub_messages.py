"""A scripted stand-in for the Anthropic Messages API, served over HTTP on loopback.

Owns one thing: answering `POST /v1/messages` with the next scripted assistant turn, so the real
`anthropic` SDK (and its `tool_runner`) can run end to end with no key and no network, and
recording every request so tests can check what the SDK sent back (e.g. `tool_result` blocks).

```py
turns = [
    [{"type": "tool_use", "name": "memory",
      "input": {"command": "create", "path": "/memories/a.md", "file_text": "hi"}}],
    [{"type": "text", "text": "Saved."}],
]
with StubMessagesServer(turns) as stub:
    client = anthropic.Anthropic(api_key="stub", base_url=stub.url)
    ...
    stub.tool_results()  # every tool_result block the SDK sent, in order
```

A turn is a list of content blocks (`text`, `tool_use`; a `tool_use` without `id` gets
`toolu_stub_<n>`), or a callable that takes the request body and returns such a list. A turn with a
`tool_use` block ends with `stop_reason: "tool_use"`, otherwise `"end_turn"`. Requests with
`"stream": true` are answered as server-sent events. When the script runs out, the stub answers
HTTP 400 (which the SDK does not retry) and records the overrun in `errors`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Block = dict[str, Any]
Turn = Sequence[Block] | Callable[[dict[str, Any]], Sequence[Block]]


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: many concurrent SDK clients (the async tool's
    # tests run dozens of conversations on one loop) then see connection resets, which the SDK
    # retries with back-off - slow and noisy. 128 is the kernel's usual somaxconn floor.
    request_queue_size = 128
    daemon_threads = True


class StubMessagesServer:
    """Replays `turns` as successive `POST /v1/messages` replies on `127.0.0.1:<free port>`.

    Use as a context manager (or `start()` / `stop()`). `url` is the SDK's `base_url`;
    `requests` holds each request's JSON body, `headers` their headers, in arrival order.
    """

    def __init__(self, turns: Sequence[Turn], *, model: str = "claude-stub") -> None:
        self.turns = list(turns)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._next_turn = 0
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("StubMessagesServer is not started")
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    def start(self) -> StubMessagesServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output quiet

            def do_POST(self) -> None:
                stub._handle(self)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="stub-messages")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> StubMessagesServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what the SDK sent -------------------------------------------------------------------

    @property
    def turns_left(self) -> int:
        return len(self.turns) - self._next_turn

    def tool_results(self) -> list[Block]:
        """Every `tool_result` block in the newest user message of each request, in order."""
        out: list[Block] = []
        for body in self.requests:
            messages = body.get("messages") or []
            if not messages or messages[-1].get("role") != "user":
                continue
            content = messages[-1].get("content")
            if isinstance(content, list):
                out += [
                    b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                ]
        return out

    # -- serving -----------------------------------------------------------------------------

    def _handle(self, http: BaseHTTPRequestHandler) -> None:
        length = int(http.headers.get("content-length") or 0)
        raw = http.rfile.read(length)
        if not http.path.split("?")[0].endswith("/v1/messages"):
            self._send_error(http, 404, f"stub: no route for POST {http.path}")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as err:
            self._send_error(http, 400, f"stub: request body is not JSON: {err}")
            return
        with self._lock:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in http.headers.items()})
            if self._next_turn >= len(self.turns):
                msg = f"stub: no scripted turn left (request {len(self.requests)})"
                self.errors.append(msg)
                turn: Turn | None = None
            else:
                turn = self.turns[self._next_turn]
                self._next_turn += 1
            n = next(self._ids)
        if turn is None:
            self._send_error(http, 400, msg)
            return
        blocks = turn(body) if callable(turn) else turn
        message = self._message(n, body, blocks)
        if body.get("stream"):
            self._send_stream(http, message)
        else:
            self._send_json(http, 200, message)

    def _message(self, n: int, body: dict[str, Any], blocks: Sequence[Block]) -> dict[str, Any]:
        content: list[Block] = []
        for i, block in enumerate(blocks):
            block = dict(block)
            if block.get("type") == "tool_use":
                block.setdefault("id", f"toolu_stub_{n}_{i}")
                block.setdefault("name", "memory")
                block.setdefault("input", {})
            elif block.get("type") == "text":
                block.setdefault("citations", None)
            content.append(block)
        tool_use = any(b.get("type") == "tool_use" for b in content)
        return {
            "id": f"msg_stub_{n}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or self.model,
            "content": content,
            "stop_reason": "tool_use" if tool_use else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    @staticmethod
    def _send_json(http: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode("utf-8")
        http.send_response(status)
        http.send_header("content-type", "application/json")
        http.send_header("content-length", str(len(data)))
        http.send_header("request-id", "req_stub")
        http.end_headers()
        http.wfile.write(data)

    def _send_error(self, http: BaseHTTPRequestHandler, status: int, message: str) -> None:
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        error = {"type": "error", "error": {"type": kind, "message": message}}
        self._send_json(http, status, error)

    @staticmethod
    def _events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        start = {**message, "content": [], "stop_reason": None}
        yield "message_start", {"type": "message_start", "message": start}
        for i, block in enumerate(message["content"]):
            if block["type"] == "tool_use":
                empty = {**block, "input": {}}
                yield "content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": empty}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                empty = {**block, "text": ""}
                yield "content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": empty}
                delta = {"type": "text_delta", "text": block.get("text", "")}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": i}
        yield "message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 1},
        }
        yield "message_stop", {"type": "message_stop"}

    def _send_stream(self, http: BaseHTTPRequestHandler, message: dict[str, Any]) -> None:
        data = b"".join(
            f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
            for name, payload in self._events(message)
        )
        http.send_response(200)
        http.send_header("content-type", "text/event-stream")
        http.send_header("content-length", str(len(data)))
        http.end_headers()
        http.wfile.write(data)
