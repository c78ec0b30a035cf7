"""`AsyncMemoryTool`: the memory handler as the Anthropic SDK's async memory tool.

For `AsyncAnthropic(...).beta.messages.tool_runner(tools=[AsyncMemoryTool("/memories")])`. It
owns only running commands off the event loop: each command is handed, unchanged, to a sync
`MemoryTool` (same root and options) in a worker thread, so the commands, result texts, errors
(`ToolError` with the handler's exact text) and guarantees are `MemoryTool`'s by construction.

Cancellation never interrupts a command half-way. A cancelled call either
  * had not started yet (still queued for a worker thread): it is dropped and never runs; or
  * was running: it runs to completion in its thread and the coroutine waits for it (shielded
    from further cancellations) before raising `CancelledError`; its result is discarded.
Either way, once `CancelledError` reaches the caller nothing of that call is still running,
and every file holds its old or its new content, never a mix (the handler's writes are
all-or-nothing). So a cancelled write may have been applied: view the file to find out.

asyncio only (the thread hand-off uses the running asyncio loop).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any, TypeVar

from memfs.extras import missing_extra

try:
    from anthropic.lib.tools import BetaAsyncAbstractMemoryTool, BetaFunctionToolResultType
    from anthropic.types.beta import BetaCacheControlEphemeralParam
except ModuleNotFoundError as exc:  # the optional extra: say how to install it
    raise missing_extra(exc, "memfs.memory.AsyncMemoryTool") from None
from memfs.memory.sdk import MemoryTool

__all__ = ["AsyncMemoryTool"]

T = TypeVar("T")


class _Job:
    """A call to run at most once in a worker thread, which can be called off until it starts."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._state = "queued"  # -> "running" (in a worker) or "abandoned" (called off)

    def run(self) -> Any:
        with self._lock:
            if self._state != "queued":
                return None  # abandoned before a worker got to it: do nothing
            self._state = "running"
        return self._fn()

    def abandon(self) -> bool:
        """Call the job off; True if it had not started (and now never will)."""
        with self._lock:
            if self._state == "queued":
                self._state = "abandoned"
                return True
            return False


class AsyncMemoryTool(BetaAsyncAbstractMemoryTool):
    """Claude's memory tool backed by the directory `root`, for the SDK's async tool runner.

    ```py
    runner = client.beta.messages.tool_runner(  # client = anthropic.AsyncAnthropic()
        model=..., max_tokens=..., tools=[AsyncMemoryTool("/memories")], messages=[...]
    )
    final = await runner.until_done()
    ```

    `max_file_bytes`, `secrets_guard`, `agent_id` and `allow_local` are `MemoryTool`'s (as there;
    `None` keeps the handler's default size limit). `executor` runs the commands; by default the
    running loop's default executor, the one `asyncio.to_thread` uses (bounded: at most
    `min(32, cpus + 4)` threads, so a hung mount cannot grow threads without bound). Pass your own
    to keep memory commands apart from other blocking work. One tool serves any number of
    concurrent calls, and calls from different event loops.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int | None = None,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        secrets_guard: bool = False,
        agent_id: str | None = None,
        shared: Mapping[str, str | os.PathLike[str]] | None = None,
        executor: Executor | None = None,
        allow_local: bool = False,
    ) -> None:
        super().__init__(cache_control=cache_control)
        options: dict[str, Any] = {"secrets_guard": secrets_guard, "agent_id": agent_id,
                                   "shared": shared, "allow_local": allow_local}
        if max_file_bytes is not None:
            options["max_file_bytes"] = max_file_bytes
        self._sync = MemoryTool(root, **options)
        self.handler = self._sync.handler
        self._executor = executor

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker thread; see the module docstring for cancellation."""
        loop = asyncio.get_running_loop()
        job = _Job(functools.partial(contextvars.copy_context().run, fn, *args))
        done = loop.run_in_executor(self._executor, job.run)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError as cancelled:
            if not job.abandon():
                # Already running: let it finish, so no write outlives the cancelled call.
                while not done.done():
                    try:
                        await asyncio.shield(done)
                    except asyncio.CancelledError:
                        continue
                if not done.cancelled():
                    done.exception()  # retrieved: its outcome is dropped with the call
            raise cancelled

    async def call(self, input: object) -> BetaFunctionToolResultType:
        # The raw input, not the SDK's parsed model: the handler's checks word the errors.
        return await self._in_thread(self._sync.call, input)

    async def _run(self, command: Any) -> BetaFunctionToolResultType:
        return await self._in_thread(self._sync._run, command)

    # The SDK's method per memory_20250818 command, each handing it on as `call` does.
    view = create = str_replace = insert = delete = rename = _run

    async def clear_all_memory(self) -> BetaFunctionToolResultType:
        return await self._in_thread(self._sync.clear_all_memory)
