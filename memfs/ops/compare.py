"""One version's bytes, and two versions compared: ``memfs show`` and ``memfs diff``.

``show PATH@VERSION`` prints a version's content (``PATH`` alone: the current one). ``diff PATH
[V1] [V2]`` is a unified diff from V1 to V2: V2 defaults to the current content, V1 to the
newest version older than V2 whose content differs from it (what ``memfs restore`` would bring
back). A version is named by its id or a unique prefix of it (4 characters or more), as
``memfs history`` lists them. A library: ``memfs.cli.versions`` parses and prints.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from memfs.ops.history import (
    HistoryError,
    Warn,
    find_version,
    key_history,
    not_a_file,
    require_versioning,
    same_content,
)
from memfs.ops.locate import Target
from memfs.ops.versions import Version, fmt_time
from memfs.s3.bucket import Bucket


def split_spec(spec: str) -> tuple[str, str | None]:
    """``notes.md@3HL4kqtJ`` → (``notes.md``, ``3HL4kqtJ``); an ``@`` in a directory name, or
    none in the last component, names no version."""
    head, at, version = spec.rpartition("@")
    if not at or not head or "/" in version or not version:
        return spec, None
    return head, version


def _versions(s3: Bucket, target: Target, warn: Warn | None) -> list[Version]:
    require_versioning(s3, target, warn)
    entries = key_history(s3, target.key)
    if not entries:
        raise not_a_file(s3, target)
    return entries


def _stored(entries: Sequence[Version], version_id: str | None, display: str) -> Version:
    """The version named, or the current content (after a deletion: the last one before it)."""
    if version_id is None:
        for v in entries:
            if not v.deleted:
                return v
        raise HistoryError(f"{display} has no stored version (only deletions)")
    v = find_version(entries, version_id, display)
    if v.deleted:
        raise HistoryError(f"version {v.version_id} of {display} is a deletion: it has no "
                           "content (memfs history shows the versions that do)")
    return v


def show(s3: Bucket, target: Target, version_id: str | None, *, warn: Warn | None = None
         ) -> tuple[Version, bytes]:
    """The version (default: current) and its bytes."""
    display = target.display(target.rel)
    v = _stored(_versions(s3, target, warn), version_id, display)
    return v, s3.get(v.key, v.version_id)


@dataclass(frozen=True)
class Diff:
    old: Version
    new: Version
    text: str  # a unified diff ("" when the contents are equal), or a line for binary content


def diff(s3: Bucket, target: Target, v1: str | None = None, v2: str | None = None, *,
         warn: Warn | None = None, context: int = 3) -> Diff:
    """Unified diff between two versions (see the module text for the defaults)."""
    display = target.display(target.rel)
    entries = _versions(s3, target, warn)
    new = _stored(entries, v2, display)
    if v1 is not None:
        old = _stored(entries, v1, display)
    else:
        older = [v for v in entries[entries.index(new) + 1:] if not v.deleted]
        found = next((v for v in older if not same_content(s3, new, v)), None)
        if found is None:
            raise HistoryError(f"{display}: no version older than {new.version_id} has different "
                               "content (memfs history lists them)")
        old = found
    a, b = s3.get(old.key, old.version_id), s3.get(new.key, new.version_id)
    labels = [f"{display}@{v.version_id}" for v in (old, new)]
    try:
        ta, tb = a.decode("utf-8"), b.decode("utf-8")
    except UnicodeDecodeError:
        same = "are identical" if a == b else "differ"
        return Diff(old, new, f"binary versions {labels[0]} and {labels[1]} {same}\n")
    lines = difflib.unified_diff(ta.splitlines(keepends=True), tb.splitlines(keepends=True),
                                 labels[0], labels[1], fmt_time(old.time), fmt_time(new.time),
                                 n=context)
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return Diff(old, new, "".join(out))
