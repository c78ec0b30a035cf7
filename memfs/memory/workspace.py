"""What every command works on: the roots, the limits, the secrets guard and the agent's name.

``Workspace`` holds the directory standing for ``/memories``, the read-only shared areas shown
beside it, the size limit, the secrets guard and the agent id, and the checks a command makes with
them before it writes (``_writable``, ``_encode_for_write``, ``_guard``). The implementations
(``memfs.memory.edits``, the handler's own view/create/delete/rename) work on one; the dispatcher's
``MemoryHandler`` (``memfs.memory.commands``) is one, so no implementation needs the dispatcher,
not even for a type.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from memfs.memory import names, secrets_guard
from memfs.memory.atomic_write import Edit, write_file
from memfs.memory.errors import CommandError, write_error
from memfs.memory.paths import MemoryPath, MemoryRoot, parse
from memfs.protocol import MAX_AGENT_ID, valid_agent_id

#: Largest file (UTF-8 bytes) that create/str_replace/insert will write.
DEFAULT_MAX_FILE_BYTES = 1024 * 1024


def _plain_name(name: object) -> bool:
    """One name a path can spell as itself: not hidden, no escapes, no path syntax."""
    if not isinstance(name, str) or not name or name.startswith(".") or names.has_refused(name):
        return False
    try:
        return parse(f"/memories/{name}").parts == (name,)
    except CommandError:
        return False


class Workspace:
    """The state every command shares (see the module docstring and ``MemoryHandler``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        secrets_guard: bool = False,
        agent_id: str | None = None,
        shared: Mapping[str, str | os.PathLike[str]] | None = None,
    ) -> None:
        if agent_id is not None and not valid_agent_id(agent_id):
            raise ValueError(
                f"agent_id must be 1-{MAX_AGENT_ID} printable ASCII characters, got {agent_id!r}"
            )
        self.root = MemoryRoot(root)
        #: Read-only areas shown as `/memories/<name>` (e.g. a team's notes next to the tenant's).
        self.shared: dict[str, MemoryRoot] = {}
        for name, path in (shared or {}).items():
            if not _plain_name(name):
                raise ValueError(f"shared area name must be one plain name, got {name!r}")
            self.shared[name] = MemoryRoot(path)
        self.max_file_bytes = max_file_bytes
        self.secrets_guard = secrets_guard
        self.agent_id = agent_id or None

    def _encode_for_write(self, mp: MemoryPath, content: str) -> bytes:
        data = content.encode("utf-8")
        if len(data) > self.max_file_bytes:
            raise CommandError(
                f"{mp.display} would be {len(data):,} bytes, over the {self.max_file_bytes:,}-byte "
                "limit for one memory file; nothing was written. Split the content across "
                "several smaller files."
            )
        return data

    def _guard(self, mp: MemoryPath, content: str, changed: tuple[int, int] | None = None) -> None:
        """With the secrets guard on, refuse `content` if the part in `changed` has a credential.

        Only findings overlapping the changed range count, so editing a file that already holds
        something credential-like (written before the guard was on) stays possible.
        """
        if not self.secrets_guard:
            return
        findings = secrets_guard.scan(content, changed)
        if findings:
            raise CommandError(secrets_guard.refusal(mp.display, findings))

    def _write(
        self,
        dir_fd: int,
        mp: MemoryPath,
        data: bytes,
        *,
        exclusive: bool = False,
        edit: Edit | None = None,
    ) -> None:
        try:
            if edit is None:
                write_file(dir_fd, mp.name, data, exclusive=exclusive, agent_id=self.agent_id)
            else:
                write_file(dir_fd, mp.name, data, agent_id=self.agent_id, edit=edit)
        except FileExistsError:
            raise
        except OSError as err:
            raise write_error(mp.display, err) from err

    def _locate(self, mp: MemoryPath) -> tuple[MemoryRoot, MemoryPath]:
        """The root that holds `mp` (a shared area's, or the tenant's) and `mp` relative to it."""
        if mp.parts and mp.parts[0] in self.shared:
            return self.shared[mp.parts[0]], MemoryPath(mp.display, mp.parts[1:], mp.parts[:1])
        return self.root, mp

    def _writable(self, *mps: MemoryPath) -> None:
        """Refuse a write, rename or delete that touches a read-only shared area."""
        for mp in mps:
            if mp.parts and mp.parts[0] in self.shared:
                raise CommandError(
                    f"The path {mp.display} is in /memories/{names.escape(mp.parts[0])}, a "
                    "read-only shared area: it can be viewed, but not created in, edited, "
                    "renamed, moved or deleted. Nothing was changed."
                )
