"""Claude's memory tool (`memory_20250818`) executed with plain file operations on a directory.

Owns the six commands (view, create, str_replace, insert, delete, rename), their input checks and
their exact result texts, plus the three ways to drive them: `MemoryHandler.run()` (text or
`CommandError`), `tool_result()` (a Messages API `tool_result` block), and `serve_jsonl()` (one JSON
command per input line, one JSON result per output line, behind `memfs handle`). `MemoryTool`, the
Anthropic SDK adapter, is importable from here but only loads `anthropic` when first used.

Paths are resolved by `memfs.paths` (never through a symlink, never outside the root), writes go
through `memfs.atomic_write` (all or nothing; one PUT on a memfs mount), and view formatting lives
in `memfs.memory_view`. Texts follow the SDK's `BetaLocalFilesystemMemoryTool`; every deliberate
difference is listed in docs/HANDLER.md.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import IO, TYPE_CHECKING, Any

from memfs import memory_view, secrets_guard
from memfs.atomic_write import Edit, open_edit, rename_noreplace, write_file
from memfs.handler_errors import CommandError, list_error, os_error, write_error
from memfs.paths import (
    MemoryPath,
    MemoryRoot,
    PathMissing,
    PathNotDirectory,
    parse,
    symlink_refused,
)
from memfs.protocol import MAX_AGENT_ID, valid_agent_id

if TYPE_CHECKING:
    from memfs.memory_tool import MemoryTool

__all__ = [
    "COMMANDS",
    "DEFAULT_MAX_FILE_BYTES",
    "CommandError",
    "MemoryHandler",
    "MemoryTool",
    "serve_jsonl",
    "tool_result",
]

#: Largest file (UTF-8 bytes) that create/str_replace/insert will write.
DEFAULT_MAX_FILE_BYTES = 1024 * 1024
#: Largest file view/str_replace/insert will read (anything bigger is refused, not loaded).
MAX_READ_BYTES = 64 * 1024 * 1024

Content = str | list[dict[str, Any]]

_REQUIRED, _OPTIONAL = True, False
#: command -> field -> (JSON type name, required)
_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "view": {"path": ("string", _REQUIRED), "view_range": ("array", _OPTIONAL)},
    "create": {
        "path": ("string", _REQUIRED),
        "file_text": ("string", _REQUIRED),
        "exclusive": ("boolean", _OPTIONAL),
    },
    "str_replace": {
        "path": ("string", _REQUIRED),
        "old_str": ("string", _REQUIRED),
        "new_str": ("string", _OPTIONAL),
    },
    "insert": {
        "path": ("string", _REQUIRED),
        "insert_line": ("integer", _REQUIRED),
        "insert_text": ("string", _REQUIRED),
    },
    "delete": {"path": ("string", _REQUIRED)},
    "rename": {"old_path": ("string", _REQUIRED), "new_path": ("string", _REQUIRED)},
}
COMMANDS = tuple(_FIELDS)
_TEXT_FIELDS = ("file_text", "old_str", "new_str", "insert_text")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _validate(command: object) -> tuple[str, dict[str, Any]]:
    """Check the command's shape; return its name and fields (optional ones defaulted to None)."""
    if not isinstance(command, Mapping):
        raise CommandError(f"The memory command must be a JSON object, got {_json_type(command)}.")
    name = command.get("command")
    expected = ", ".join(COMMANDS)
    if name is None:
        raise CommandError(f"Missing required parameter `command`. Expected one of: {expected}.")
    if not isinstance(name, str):
        raise CommandError(f"Parameter `command` must be a string, got {_json_type(name)}.")
    fields = _FIELDS.get(name)
    if fields is None:
        raise CommandError(f"Unknown command `{name}`. Expected one of: {expected}.")
    out: dict[str, Any] = {}
    for field, (kind, required) in fields.items():
        value = command.get(field)
        if value is None:
            if required:
                raise CommandError(f"Missing required parameter `{field}` for command `{name}`.")
            out[field] = None
            continue
        if _json_type(value) != kind:
            article = "an" if kind[0] in "aeiou" else "a"
            raise CommandError(
                f"Parameter `{field}` for command `{name}` must be {article} {kind}, "
                f"got {_json_type(value)}."
            )
        if field in _TEXT_FIELDS:
            _check_text(field, value)
        out[field] = value
    return name, out


def _check_text(field: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CommandError(
            f"Parameter `{field}` is not valid Unicode text (it contains unpaired surrogates); "
            "nothing was written."
        ) from None
    if "\x00" in value:
        raise CommandError(
            f"Parameter `{field}` contains NUL characters; memory files hold text only, "
            "nothing was written."
        )


def _find_all(content: str, needle: str) -> list[int]:
    """Start offsets of every occurrence of `needle`, overlapping ones included."""
    found, pos = [], content.find(needle)
    while pos != -1:
        found.append(pos)
        pos = content.find(needle, pos + 1)
    return found


def _split_lines_keeping_cr(content: str) -> list[str]:
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class MemoryHandler:
    """Executes memory commands on the directory `root`, which stands for `/memories`.

    `run(command)` returns the text for Claude or raises `CommandError`; `execute(command)` is the
    same but returns content blocks (a list) for image views. One handler may serve many commands
    and stays usable after any error. `max_file_bytes` caps the UTF-8 size of any file a command
    writes. `secrets_guard` makes create/str_replace/insert refuse new content that looks like a
    credential (`memfs.secrets_guard`). `agent_id` (printable ASCII, at most 200 characters) is
    recorded by a memfs mount as the `memfs-agent` of every file this handler writes; it is
    ignored on other filesystems.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        secrets_guard: bool = False,
        agent_id: str | None = None,
    ) -> None:
        if agent_id is not None and not valid_agent_id(agent_id):
            raise ValueError(
                f"agent_id must be 1-{MAX_AGENT_ID} printable ASCII characters, got {agent_id!r}"
            )
        self.root = MemoryRoot(root)
        self.max_file_bytes = max_file_bytes
        self.secrets_guard = secrets_guard
        self.agent_id = agent_id or None
        self._dispatch: dict[str, Callable[[dict[str, Any]], Content]] = {
            "view": self._view,
            "create": self._create,
            "str_replace": self._str_replace,
            "insert": self._insert,
            "delete": self._delete,
            "rename": self._rename,
        }

    # -- entry points ----------------------------------------------------------------------

    def execute(self, command: Mapping[str, Any]) -> Content:
        """Run one command; return a string, or content blocks for an image view."""
        name, fields = _validate(command)
        display = fields.get("path") or fields.get("old_path") or ""
        try:
            return self._dispatch[name](fields)
        except PathNotDirectory:
            raise self._missing(display, name) from None
        except PathMissing:
            raise self._missing(display, name) from None
        except OSError as err:
            raise os_error(_ACTIONS[name], display, err) from err

    def run(self, command: Mapping[str, Any]) -> str:
        """Run one command; return the text for Claude (an image view returns its caption)."""
        result = self.execute(command)
        if isinstance(result, str):
            return result
        return "\n".join(str(b["text"]) for b in result if b.get("type") == "text")

    def tool_result(self, block: Any) -> dict[str, Any]:
        """Run a `tool_use` block (dict or SDK object); return the matching `tool_result` dict."""
        return tool_result(self, block)

    def clear_all(self) -> None:
        """Delete everything under the root (the root itself stays)."""
        with self.root.open_dir(MemoryPath("/memories", ())) as fd:
            for entry in os.listdir(fd):
                self._remove(fd, entry)

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _missing(display: str, name: str) -> CommandError:
        if name in ("view", "str_replace", "insert"):
            return CommandError(f"The path {display} does not exist. Please provide a valid path.")
        return CommandError(f"The path {display} does not exist")

    @staticmethod
    def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _read_bytes(self, dir_fd: int, mp: MemoryPath) -> bytes:
        """The bytes of the regular file `mp` (leaf of `dir_fd`), never through a symlink."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(mp.name, flags, dir_fd=dir_fd)
        except OSError as err:
            raise self._open_refusal(mp, err) from None
        with os.fdopen(fd, "rb") as f:
            self._check_readable(f.fileno(), mp)
            return f.read(MAX_READ_BYTES + 1)

    @staticmethod
    def _open_refusal(mp: MemoryPath, err: OSError) -> Exception:
        """What to raise when opening the file `mp` failed with `err`."""
        if isinstance(err, FileNotFoundError):
            return CommandError(
                f"The file {mp.display} no longer exists (may have been deleted or renamed "
                "concurrently)."
            )
        if err.errno == errno.ELOOP:
            return symlink_refused(mp.display, mp.display)
        if err.errno == errno.EISDIR:
            return CommandError(f"The path {mp.display} is not a file.")
        return err

    @staticmethod
    def _check_readable(fd: int, mp: MemoryPath) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CommandError(f"Unsupported file type for {mp.display}")
        if st.st_size > MAX_READ_BYTES:
            raise CommandError(
                f"The file {mp.display} is {memory_view.format_size(st.st_size)}, too large "
                f"for the memory tool to read (limit "
                f"{memory_view.format_size(MAX_READ_BYTES)})."
            )

    def _decode(self, mp: MemoryPath, data: bytes) -> str:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or "\x00" in text:
            raise CommandError(
                f"The file {mp.display} is not UTF-8 text (it looks binary); the memory tool "
                "reads UTF-8 text files and .png/.jpg/.jpeg images only."
            )
        return text

    def _read_text(self, dir_fd: int, mp: MemoryPath) -> str:
        return self._decode(mp, self._read_bytes(dir_fd, mp))

    @contextmanager
    def _edit(self, dir_fd: int, mp: MemoryPath) -> Iterator[tuple[Edit, str]]:
        """Open `mp` for one read-modify-write; yield the edit and the text it read.

        On a memfs mount the read and the later `_write(..., edit=)` are one transaction: an
        edit committed by anyone in between makes the write fail (ESTALE) instead of being lost.
        Leaving the block without writing changes nothing.
        """
        with ExitStack() as stack:
            try:
                edit = stack.enter_context(open_edit(dir_fd, mp.name, agent_id=self.agent_id))
            except OSError as err:
                raise self._open_refusal(mp, err) from None
            self._check_readable(edit.fd, mp)
            yield edit, self._decode(mp, edit.read(MAX_READ_BYTES))

    def _regular_file(self, dir_fd: int, mp: MemoryPath, command: str) -> None:
        """Require `mp` to be an existing regular file (for str_replace and insert)."""
        st = None if mp.is_root else self._lstat(dir_fd, mp.name)
        if mp.is_root or (st is not None and stat.S_ISDIR(st.st_mode)):
            raise CommandError(f"The path {mp.display} is not a file.")
        if st is None:
            raise self._missing(mp.display, command)
        if stat.S_ISLNK(st.st_mode):
            raise symlink_refused(mp.display, mp.display)
        if not stat.S_ISREG(st.st_mode):
            raise CommandError(f"The path {mp.display} is not a file.")

    def _encode_for_write(self, mp: MemoryPath, text: str) -> bytes:
        data = text.encode("utf-8")
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

    def _remove(self, dir_fd: int, name: str) -> None:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            # With dir_fd, rmtree uses the fd-based walk that never follows symlinks.
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)

    # -- commands --------------------------------------------------------------------------

    def _view(self, f: dict[str, Any]) -> Content:
        mp = parse(f["path"])
        with self.root.walk(mp) as parent:
            if mp.is_root:
                return self._list_dir(mp, parent)
            st = self._lstat(parent, mp.name)
            if st is None:
                raise self._missing(mp.display, "view")
            if stat.S_ISLNK(st.st_mode):
                raise symlink_refused(mp.display, mp.display)
            if stat.S_ISDIR(st.st_mode):
                with self.root.open_dir(mp) as fd:
                    return self._list_dir(mp, fd)
            if not stat.S_ISREG(st.st_mode):
                raise CommandError(f"Unsupported file type for {mp.display}")
            media_type = memory_view.image_type(mp.name)
            if media_type is not None:
                if f["view_range"] is not None:
                    raise CommandError(
                        f"`view_range` does not apply to the image {mp.display}; "
                        "view it without one."
                    )
                return memory_view.image_view(mp.display, media_type, self._read_bytes(parent, mp))
            return memory_view.file_view(mp.display, self._read_text(parent, mp), f["view_range"])

    def _list_dir(self, mp: MemoryPath, dir_fd: int) -> str:
        """The listing of `mp` two levels deep. Any directory it covers that cannot be listed
        fails the whole view (never a listing with entries silently missing); only entries that
        vanish while listing are left out."""
        entries: list[tuple[int, str]] = []
        base = mp.display.rstrip("/") or mp.display

        def collect(fd: int, rel: str, depth: int) -> None:
            where = f"{base}/{rel}" if rel else mp.display
            try:
                with os.scandir(fd) as it:
                    items = sorted(it, key=lambda e: e.name)
            except OSError as err:
                raise list_error(where, err) from err
            for item in items:
                if item.name.startswith(".") or item.name in memory_view.EXCLUDED_NAMES:
                    continue
                item_rel = f"{rel}/{item.name}" if rel else item.name
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # vanished while listing
                except OSError as err:
                    raise list_error(f"{base}/{item_rel}", err) from err
                if stat.S_ISDIR(st.st_mode):
                    entries.append((memory_view.DIRECTORY_SIZE, item_rel + "/"))
                    if depth < 2:
                        try:
                            sub = os.open(item.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                          | os.O_CLOEXEC, dir_fd=fd)
                        except OSError as err:
                            if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                                continue  # vanished, or replaced by a file or symlink meanwhile
                            raise list_error(f"{base}/{item_rel}", err) from err
                        try:
                            collect(sub, item_rel, depth + 1)
                        finally:
                            os.close(sub)
                elif stat.S_ISREG(st.st_mode):
                    entries.append((st.st_size, item_rel))
                # symlinks, sockets, fifos: not memory files, not listed

        collect(dir_fd, "", 1)
        return memory_view.directory_listing(mp.display, entries)

    def _create(self, f: dict[str, Any]) -> Content:
        mp = parse(f["path"])
        if mp.is_root and f["exclusive"]:
            raise CommandError(f"File {mp.display} already exists")
        if mp.is_root:
            raise CommandError(f"The path {mp.display} is a directory; create needs a file path.")
        data = self._encode_for_write(mp, f["file_text"])
        self._guard(mp, f["file_text"])
        try:
            with self.root.walk(mp, create_parents=True) as parent:
                st = self._lstat(parent, mp.name)
                if st is not None and f["exclusive"]:
                    raise CommandError(f"File {mp.display} already exists")
                if st is not None and stat.S_ISDIR(st.st_mode):
                    raise CommandError(
                        f"The path {mp.display} is a directory; create needs a file path."
                    )
                if st is not None and stat.S_ISLNK(st.st_mode):
                    raise symlink_refused(mp.display, mp.display)
                if st is not None and not stat.S_ISREG(st.st_mode):
                    raise CommandError(f"Unsupported file type for {mp.display}")
                try:
                    self._write(parent, mp, data, exclusive=st is None)
                except FileExistsError:
                    if f["exclusive"]:
                        raise CommandError(f"File {mp.display} already exists") from None
                    raise CommandError(
                        f"File {mp.display} was created concurrently by someone else; "
                        "view it, then retry."
                    ) from None
        except PathNotDirectory as err:
            raise CommandError(
                f"Cannot create {mp.display}: {err.where} is a file, not a directory."
            ) from None
        if st is None:
            return f"File created successfully at: {mp.display}"
        return f"File overwritten successfully at: {mp.display}"

    def _str_replace(self, f: dict[str, Any]) -> Content:
        mp = parse(f["path"])
        old, new = f["old_str"], f["new_str"] or ""
        if old == "":
            raise CommandError(
                "Parameter `old_str` must not be empty: give the exact text to replace, with "
                "enough context to occur once in the file."
            )
        with self.root.walk(mp) as parent:
            self._regular_file(parent, mp, "str_replace")
            with self._edit(parent, mp) as (edit, content):
                found = _find_all(content, old)
                if not found:
                    raise CommandError(
                        f"No replacement was performed, old_str `{old}` did not appear verbatim "
                        f"in {mp.display}."
                    )
                if len(found) > 1:
                    lines = ", ".join(str(content.count("\n", 0, pos) + 1) for pos in found)
                    raise CommandError(
                        f"No replacement was performed. Multiple occurrences of old_str `{old}` "
                        f"in lines: {lines}. Please ensure it is unique"
                    )
                pos = found[0]
                new_content = content[:pos] + new + content[pos + len(old) :]  # literal
                self._guard(mp, new_content, (pos, pos + len(new)))
                self._write(parent, mp, self._encode_for_write(mp, new_content), edit=edit)
        changed = content.count("\n", 0, pos)
        new_lines = new_content.split("\n")
        first, last = max(0, changed - 2), min(len(new_lines), changed + 3)
        snippet = [memory_view.numbered(n, new_lines[n - 1]) for n in range(first + 1, last + 1)]
        return (
            "The memory file has been edited. Here is the snippet showing the change "
            "(with line numbers):\n" + "\n".join(snippet)
        )

    def _insert(self, f: dict[str, Any]) -> Content:
        mp = parse(f["path"])
        with self.root.walk(mp) as parent:
            self._regular_file(parent, mp, "insert")
            with self._edit(parent, mp) as (edit, content):
                lines = _split_lines_keeping_cr(content)
                at = f["insert_line"]
                if not 0 <= at <= len(lines):
                    raise CommandError(
                        f"Invalid `insert_line` parameter: {at}. "
                        f"It should be within the range [0, {len(lines)}]."
                    )
                lines.insert(at, f["insert_text"].rstrip("\n"))
                # Every line ends with a newline afterwards; unlike the SDK (which adds one only
                # if the joined text lacks it), a blank last line or an inserted empty line
                # survives.
                new_content = "\n".join(lines) + "\n"
                start = sum(len(line) + 1 for line in lines[:at])
                self._guard(mp, new_content, (start, start + len(lines[at])))
                self._write(parent, mp, self._encode_for_write(mp, new_content), edit=edit)
        return f"The file {mp.display} has been edited."

    def _delete(self, f: dict[str, Any]) -> Content:
        mp = parse(f["path"])
        if mp.is_root:
            raise CommandError("Cannot delete the /memories directory itself")
        with self.root.walk(mp) as parent:
            if self._lstat(parent, mp.name) is None:
                raise self._missing(mp.display, "delete")
            try:
                self._remove(parent, mp.name)
            except FileNotFoundError:
                raise self._missing(mp.display, "delete") from None
        return f"Successfully deleted {mp.display}"

    def _rename(self, f: dict[str, Any]) -> Content:
        src, dst = parse(f["old_path"]), parse(f["new_path"])
        if src.is_root:
            raise CommandError("Cannot rename the /memories directory itself")
        exists = CommandError(f"The destination {dst.display} already exists")
        not_dir = "Cannot move {src} to {dst}: {where} is a file, not a directory."
        # Checks in the SDK's order (destination first), all before anything is made, so a
        # refused rename leaves no new directories behind.
        if dst.is_root:
            raise exists
        dst_blocked = None
        try:
            with self.root.walk(dst) as dst_parent:
                if self._lstat(dst_parent, dst.name) is not None:
                    raise exists
        except PathMissing:
            pass  # missing parents are made below
        except PathNotDirectory as err:
            dst_blocked = err.where  # reported after a missing source, as rename(2) would
        with self.root.walk(src) as src_parent:
            if self._lstat(src_parent, src.name) is None:
                raise self._missing(src.display, "rename")
            if dst_blocked is not None:
                raise CommandError(
                    not_dir.format(src=src.display, dst=dst.display, where=dst_blocked)
                )
            if dst.parts[: len(src.parts)] == src.parts:
                raise CommandError(f"Cannot move {src.display} into itself ({dst.display}).")
            try:
                with self.root.walk(dst, create_parents=True) as dst_parent:
                    rename_noreplace(src_parent, src.name, dst_parent, dst.name)
            except PathNotDirectory as err:
                raise CommandError(
                    not_dir.format(src=src.display, dst=dst.display, where=err.where)
                ) from None
            except FileExistsError:
                raise exists from None
            except FileNotFoundError:
                raise self._missing(src.display, "rename") from None
        return f"Successfully renamed {src.display} to {dst.display}"


_ACTIONS = {
    "view": "view",
    "create": "create",
    "str_replace": "edit",
    "insert": "edit",
    "delete": "delete",
    "rename": "rename",
}


def _block_field(block: Any, name: str) -> Any:
    if isinstance(block, Mapping):
        return block.get(name)
    return getattr(block, name, None)


def tool_result(handler: MemoryHandler, block: Any) -> dict[str, Any]:
    """Execute a memory `tool_use` block (a dict or an SDK `BetaToolUseBlock`) with `handler`.

    Returns `{"type": "tool_result", "tool_use_id": ..., "content": ..., "is_error": bool}`, where
    `content` is the text (or image content blocks) for Claude.
    """
    tool_use_id = _block_field(block, "id")
    command = _block_field(block, "input")
    content: Content
    try:
        content = handler.execute(command if command is not None else {})
        is_error = False
    except CommandError as err:
        content, is_error = str(err), True
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content,
            "is_error": is_error}


def _emit(outfile: IO[str] | IO[bytes], obj: Mapping[str, Any]) -> None:
    text = json.dumps(obj, ensure_ascii=True) + "\n"
    if isinstance(outfile, io.TextIOBase):
        outfile.write(text)
    else:
        outfile.write(text.encode("ascii"))  # type: ignore[arg-type]
    outfile.flush()


def serve_jsonl(
    root: str | os.PathLike[str],
    infile: IO[str] | IO[bytes],
    outfile: IO[str] | IO[bytes],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    errfile: IO[str] | None = None,
    secrets_guard: bool = False,
    agent_id: str | None = None,
) -> int:
    """Serve the JSON-lines protocol until `infile` ends; return the process exit status.

    Each non-blank input line is one JSON object, either a bare command
    (`{"command": "view", "path": "/memories"}`) answered with `{"content": ..., "is_error": b}`,
    or a `tool_use` block (`{"type": "tool_use", "id": ..., "input": {...}}`) answered with its
    `tool_result` block. Every such line gets exactly one output line (ASCII JSON, flushed), in
    order; a line that is not valid JSON gets `{"content": "Invalid JSON ...", "is_error": true}`.
    Returns 0 at end of input, 2 (after one line on `errfile`) if `root` is not a directory.
    `secrets_guard` and `agent_id` are passed to `MemoryHandler`.
    """
    err_out = errfile if errfile is not None else sys.stderr
    try:
        handler = MemoryHandler(root, max_file_bytes=max_file_bytes,
                                secrets_guard=secrets_guard, agent_id=agent_id)
    except (OSError, ValueError) as err:
        print(f"memfs handle: {err}", file=err_out)
        return 2
    if isinstance(infile, io.TextIOWrapper):
        infile = infile.buffer  # decode ourselves, so bad UTF-8 is one error line, not a crash
    for lineno, raw in enumerate(infile, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                _emit(outfile, {"content": f"Line {lineno} is not valid UTF-8 ({err.reason} at "
                                           f"byte {err.start}).", "is_error": True})
                continue
        else:
            line = raw
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            msg = err.msg if isinstance(err, json.JSONDecodeError) else "nesting too deep"
            col = f" (column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
            _emit(outfile, {"content": f"Invalid JSON on line {lineno}: {msg}{col}.",
                            "is_error": True})
            continue
        if isinstance(obj, Mapping) and obj.get("type") == "tool_use":
            _emit(outfile, tool_result(handler, obj))
            continue
        try:
            result: dict[str, Any] = {"content": handler.execute(obj), "is_error": False}
        except CommandError as err:
            result = {"content": str(err), "is_error": True}
        _emit(outfile, result)
    return 0


def __getattr__(name: str) -> Any:
    # MemoryTool needs the optional `anthropic` package: import it only when asked for.
    if name == "MemoryTool":
        from memfs.memory_tool import MemoryTool

        return MemoryTool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
