"""The memories as resources: their URIs, their listing, their reading, and which changes show.

What an MCP client sees of the memory directory besides the `memory` tool (`memfs mcp`; the MCP
wiring is `memfs.memory.mcp_resources`). Imports no MCP SDK, so it is tested on its own.

* **URIs.** A memory file is ``memory:///<path under /memories>``, each name percent-encoded as
  UTF-8 (RFC 3986: every byte but ``A-Z a-z 0-9 - . _ ~``), so ``/memories/notes/to do.md`` is
  ``memory:///notes/to%20do.md``. A directory's URI ends in ``/`` (``memory:///notes/``;
  ``memory:///`` is ``/memories`` itself): it can be subscribed to, not read. The scheme is
  memfs's own (the MCP specification allows custom schemes); ``file://`` is not used because a
  client would take it for a path on its own machine.
* **What is a resource.** Every regular file the tool's ``view`` would list at any depth: in the
  served root (the tenant's directory) and in each read-only shared area, shown under its name as
  ``view`` shows it (a shared area hides a root entry of the same name). Hidden names (starting
  with ``.``: the mount's ``.memfs-conflicts``, the handler's ``.memfs-tmp-*``), ``node_modules``,
  symbolic links and special files are not resources, at any depth, and a URI naming one is
  refused.
* **Refused URIs** (`ResourceRefused`, one sentence saying why): another scheme, a host, a query
  or fragment, an empty name (``//``), ``.`` or ``..`` (also percent-encoded), a ``/`` or NUL
  inside a name, a hidden name. Nothing outside the root can be named: names are opened one by
  one under the root without following symbolic links (`memfs.memory.paths`).
"""

from __future__ import annotations

import mimetypes
import os
import stat
from collections.abc import Generator, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import quote, unquote_to_bytes, urlsplit

from memfs.memory import files, names, view
from memfs.memory.errors import CommandError
from memfs.memory.paths import MemoryPath, MemoryRoot, PathMissing, PathNotDirectory

SCHEME = "memory"
ROOT_URI = f"{SCHEME}:///"
#: The URI template of every memory (RFC 6570 reserved expansion: `/` stays as it is).
URI_TEMPLATE = f"{SCHEME}:///{{+path}}"
#: Most resources one `resources/list` page holds; the cursor names the last one.
PAGE_SIZE = 500

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: What a change event means for the list of resources: a name came or went.
STRUCTURAL = frozenset({"created", "removed", "moved_from", "moved_to", "overflow"})

Parts = tuple[str, ...]


class ResourceRefused(ValueError):
    """A URI that names no resource here (or a file that cannot be read); `str()` says why."""


def visible(name: str) -> bool:
    """Whether a name can be part of a resource's path (what `view` lists)."""
    return bool(name) and not name.startswith(".") and name not in view.EXCLUDED_NAMES


def uri_of(parts: Parts, is_dir: bool = False) -> str:
    """The canonical URI of the file (or directory) at `parts` under `/memories`."""
    path = "/".join(quote(os.fsencode(p), safe="") for p in parts)
    return ROOT_URI + path + ("/" if is_dir and parts else "")


def display_of(parts: Parts) -> str:
    """`parts` as the memory tool writes the path (`/memories/...`, refused characters escaped)."""
    return "/".join(("/memories", *(names.escape(p) for p in parts)))


@dataclass(frozen=True)
class Target:
    """A parsed URI: the names under `/memories`, and whether it names a directory."""

    parts: Parts
    is_dir: bool


def parse_uri(uri: str) -> Target:
    """The resource `uri` names; `ResourceRefused` if it names none (see the module's doc)."""
    if not isinstance(uri, str):
        raise ResourceRefused(f"A resource URI must be a string, got {type(uri).__name__}.")
    split = urlsplit(uri)
    if split.scheme.lower() != SCHEME:
        raise ResourceRefused(f"{uri!r} is not a memory URI: memories are {ROOT_URI}PATH, "
                              f"e.g. {ROOT_URI}notes/todo.md.")
    if split.netloc or not split.path.startswith("/"):
        raise ResourceRefused(f"{uri!r} names a host or no path: memory URIs have three "
                              f"slashes ({ROOT_URI}PATH).")
    if split.query or split.fragment or "?" in uri or "#" in uri:
        raise ResourceRefused(f"{uri!r} has a query or fragment; memory URIs have neither.")
    raw = split.path[1:]
    is_dir = raw == "" or raw.endswith("/")
    parts: list[str] = []
    for comp in raw[:-1].split("/") if raw.endswith("/") else raw.split("/") if raw else ():
        name = os.fsdecode(unquote_to_bytes(comp))
        if name in ("", ".", ".."):
            raise ResourceRefused(f"{uri!r} contains {comp or 'an empty name'!r}: memory URIs "
                                  "name files under /memories plainly, without . or .. or //.")
        if "/" in name or "\x00" in name:
            raise ResourceRefused(f"{uri!r} contains {comp!r}, which decodes to a / or NUL "
                                  "inside one name.")
        if not visible(name):
            raise ResourceRefused(f"{uri!r} goes through the hidden name {comp!r}: hidden "
                                  "files and node_modules are not resources.")
        parts.append(name)
    return Target(tuple(parts), is_dir)


class Item(NamedTuple):
    """One resource of a listing: its names under `/memories` and its size in bytes."""

    parts: Parts
    size: int


@dataclass(frozen=True)
class Change:
    """What one watch event means to subscribers: the path that changed (`parts` under
    `/memories`), whether it is a directory (then everything under it changed too), and
    whether names came or went (the list of resources changed)."""

    parts: Parts
    is_dir: bool
    structural: bool


def mime_type(name: str) -> str:
    """The MIME type a resource is announced with (by its name's extension)."""
    if name.endswith(".md"):
        return "text/markdown"
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or "text/plain"


def contents(data: bytes, name: str) -> tuple[str | None, str]:
    """(text, MIME type) of a file's bytes: text when they are UTF-8 without NUL, else None
    (the caller sends them as a blob) with the type its name suggests, or octet-stream."""
    kind = mime_type(name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        guessed = mimetypes.guess_type(name, strict=False)[0]
        return None, guessed if guessed and not guessed.startswith("text/") else (
            "application/octet-stream")
    return text, kind


class ResourceSpace:
    """The files one `memfs mcp` serves as resources: the tenant's `root` and the read-only
    `shared` areas (name -> root), exactly as the memory tool shows them under `/memories`."""

    def __init__(self, root: MemoryRoot, shared: Mapping[str, MemoryRoot]) -> None:
        self.root = root
        self.shared = dict(shared)

    def areas(self) -> list[tuple[Parts, MemoryRoot]]:
        """Each watched root with where it appears under `/memories` (the tenant's first)."""
        return [((), self.root), *(((name,), area) for name, area in self.shared.items())]

    def _locate(self, parts: Parts) -> tuple[MemoryRoot, MemoryPath]:
        if parts and parts[0] in self.shared:
            return self.shared[parts[0]], MemoryPath(display_of(parts), parts[1:], parts[:1])
        return self.root, MemoryPath(display_of(parts), parts)

    # -- reading ---------------------------------------------------------------------------

    def read(self, target: Target) -> bytes:
        """The bytes of the file `target` names; `ResourceRefused` (saying why) otherwise."""
        shown = display_of(target.parts)
        if target.is_dir or not target.parts:
            raise ResourceRefused(f"{uri_of(target.parts, True)} is a directory: read its "
                                  "files (resources/list lists them); a directory URI is for "
                                  "subscribing to everything under it.")
        root, mp = self._locate(target.parts)
        try:
            with root.walk(mp) as parent:
                if mp.is_root:  # a shared area's own name
                    raise ResourceRefused(f"{shown} is a directory, not a file.")
                st = files.lstat(parent, mp.name)
                if st is None:
                    raise ResourceRefused(f"No memory file {shown} (URI "
                                          f"{uri_of(target.parts)}).")
                if not stat.S_ISREG(st.st_mode):
                    what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                    raise ResourceRefused(f"{shown} is {what}; only memory files are read.")
                return files.read_bytes(parent, mp)
        except (PathMissing, PathNotDirectory):
            raise ResourceRefused(f"No memory file {shown} (URI {uri_of(target.parts)}).") \
                from None
        except CommandError as err:  # a symlink on the way, the root gone, too large, ...
            raise ResourceRefused(str(err)) from None
        except OSError as err:
            raise ResourceRefused(f"Could not read {shown}: {os.strerror(err.errno or 0)}.") \
                from None

    # -- listing ---------------------------------------------------------------------------

    def list_files(self, after: Parts | None = None,
                   limit: int = PAGE_SIZE) -> tuple[list[Item], bool]:
        """Up to `limit` files in path order after `after` (a previous page's last item), and
        whether more follow. Subtrees wholly before `after` are not opened."""
        out: list[Item] = []
        # closing(): a page that stops early closes the directories the walk holds open.
        with closing(self._walk_top(after or ())) as items:
            for item in items:
                if len(out) == limit:
                    return out, True
                out.append(item)
        return out, False

    def _walk_top(self, after: Parts) -> Generator[Item, None, None]:
        try:
            fd = self.root.open_root()
        except CommandError as err:
            raise ResourceRefused(str(err)) from None
        try:
            listable = os.open(".", _OPEN_DIR, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            entries = [e for e in _entries(listable) if e[0] not in self.shared]
            entries += [(name, True, 0) for name in self.shared]
            yield from self._walk_entries(listable, sorted(entries), (), after)
        finally:
            os.close(listable)

    def _walk_entries(self, fd: int, entries: list[tuple[str, bool, int]], prefix: Parts,
                      after: Parts) -> Iterator[Item]:
        cur = after[len(prefix)] if len(after) > len(prefix) else None
        for name, is_dir, size in entries:
            here = (*prefix, name)
            if cur is not None and name < cur:
                continue  # wholly before the cursor
            rest = after if cur is not None and name == cur else ()
            if not is_dir:
                if not rest or here > after:
                    yield Item(here, size)
                continue
            if not prefix and name in self.shared:
                yield from self._walk_area(name, rest)
                continue
            try:
                sub = os.open(name, _OPEN_DIR, dir_fd=fd)
            except OSError:
                continue  # vanished, or replaced by a file or a symlink meanwhile
            try:
                yield from self._walk_entries(sub, sorted(_entries(sub)), here, rest)
            finally:
                os.close(sub)

    def _walk_area(self, name: str, after: Parts) -> Iterator[Item]:
        try:
            with self.shared[name].open_dir(MemoryPath(display_of((name,)), ())) as fd:
                listable = os.open(".", _OPEN_DIR, dir_fd=fd)
        except (CommandError, OSError):
            return  # an area that is gone lists empty (as its view fails, say so on read)
        try:
            yield from self._walk_entries(listable, sorted(_entries(listable)), (name,), after)
        finally:
            os.close(listable)

    # -- changes ---------------------------------------------------------------------------

    def change(self, prefix: Parts, path: str, kind: str, is_dir: bool) -> Change | None:
        """What a watch event on the area at `prefix` (`path` relative to it, "" itself)
        means to clients, or None if it concerns nothing they can see (a hidden name, a root
        entry a shared area hides)."""
        rel = tuple(path.split("/")) if path else ()
        if kind == "overflow":  # events were lost: anything in the area may have changed
            return Change(prefix, True, True)
        if not prefix and rel and rel[0] in self.shared:
            return None
        if not all(visible(n) for n in rel):
            return None
        return Change((*prefix, *rel), is_dir or not rel, kind in STRUCTURAL)


def _entries(fd: int) -> list[tuple[str, bool, int]]:
    """(name, is a directory, size) of the visible files and directories in `fd`."""
    out = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                if not visible(entry.name):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        out.append((entry.name, True, 0))
                    elif entry.is_file(follow_symlinks=False):
                        out.append((entry.name, False, entry.stat(follow_symlinks=False).st_size))
                except FileNotFoundError:
                    continue  # vanished while listing
    except OSError:
        return out  # a directory that cannot be listed lists as what was read of it
    return out


def affected(sub: Target, change: Change) -> str | None:
    """The URI to announce to a subscriber of `sub` for `change`, or None if it is not
    concerned: the changed path itself when it is `sub` or under a subscribed directory (MCP
    allows a sub-resource's URI), the subscribed URI when a directory above it changed."""
    n = len(sub.parts)
    if change.parts[:n] == sub.parts and (sub.is_dir or len(change.parts) == n):
        return uri_of(change.parts, change.is_dir)
    if change.is_dir and sub.parts[: len(change.parts)] == change.parts:
        return uri_of(sub.parts, sub.is_dir)
    return None
