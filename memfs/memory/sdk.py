"""`MemoryTool`: the handler as an Anthropic SDK memory tool, for the SDK's `tool_runner`.

Owns only the adaptation to the SDK (`anthropic.lib.tools.BetaAbstractMemoryTool`): every command,
however the SDK parsed it, goes to `MemoryHandler.execute` as a plain mapping, and `CommandError`
becomes the SDK's `ToolError`, so the runner sends `is_error: true` with our exact text. This is
the only module that imports `anthropic` (the optional `memfs-s3[anthropic]` extra).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from memfs.extras import missing_extra

try:
    from anthropic.lib.tools import (
        BetaAbstractMemoryTool,
        BetaFunctionToolResultType,
        ToolError,
    )
    from anthropic.types.beta import BetaCacheControlEphemeralParam
except ModuleNotFoundError as exc:  # the optional extra: say how to install it
    raise missing_extra(exc, "memfs.memory.MemoryTool") from None
from memfs.memory.commands import DEFAULT_MAX_FILE_BYTES, MemoryHandler
from memfs.memory.errors import CommandError
from memfs.mountinfo import require_memfs

#: The refusal's advice for the SDK tools, whose switch is a keyword argument.
ALLOW_LOCAL_HINT = "mount it first (memfs mount), or pass allow_local=True to use it as it is"


class MemoryTool(BetaAbstractMemoryTool):
    """Claude's memory tool backed by the directory `root` (a memfs mount, or any directory).

    ```py
    runner = client.beta.messages.tool_runner(
        model=..., max_tokens=..., tools=[MemoryTool("/memories")], messages=[...]
    )
    ```

    `secrets_guard`, `agent_id` and `shared` are `MemoryHandler`'s (refuse credential-looking
    content; record who wrote each file on a memfs mount; read-only shared areas). A `root` that
    is not on a memfs mount raises `memfs.mountinfo.NotOnMemfs` (a `ValueError`) unless
    `allow_local=True`: an agent started before its mount came up must not write to local disk.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        secrets_guard: bool = False,
        agent_id: str | None = None,
        shared: Mapping[str, str | os.PathLike[str]] | None = None,
        allow_local: bool = False,
    ) -> None:
        super().__init__(cache_control=cache_control)
        require_memfs(root, allow_local=allow_local, hint=ALLOW_LOCAL_HINT)
        self.handler = MemoryHandler(root, max_file_bytes=max_file_bytes,
                                     secrets_guard=secrets_guard, agent_id=agent_id,
                                     shared=shared)

    def _run(self, command: Any) -> BetaFunctionToolResultType:
        if not isinstance(command, Mapping):
            to_dict = getattr(command, "to_dict", None)
            command = to_dict() if callable(to_dict) else command
        try:
            return self.handler.execute(command)  # type: ignore[return-value]
        except CommandError as err:
            raise ToolError(str(err)) from None

    def call(self, input: object) -> BetaFunctionToolResultType:
        # The raw input, not the SDK's parsed model: our checks word the errors for Claude. Every
        # command of the table (memfs.memory.command_table) arrives here, new ones too.
        return self._run(input)

    # The SDK's method per memory_20250818 command (its `execute` of a parsed command calls
    # them): each hands the command to the handler as it is, like `call`.
    view = create = str_replace = insert = delete = rename = _run

    def clear_all_memory(self) -> BetaFunctionToolResultType:
        """Delete everything under the root, or raise `ToolError` (with the refusal's text,
        nothing deleted) if it holds more than one memory `delete` removes."""
        try:
            self.handler.clear_all()
        except CommandError as err:
            raise ToolError(str(err)) from None
        return "All memory cleared"
