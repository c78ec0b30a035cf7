"""History of memories from S3 versioning: ``memfs history``, ``memfs restore``, ``memfs log``.

Owns reading a bucket's object versions and putting an old one back:

* ``history PATH``: every version of one file, newest first (time, size, writer, agent, version
  id), deletions shown as such. Writer and agent come from the user metadata the mount writes
  with every upload (``memfs-writer`` = ``host/instance``, ``memfs-agent``): one HEAD per version
  shown, bounded by ``--limit``.
* ``restore PATH [--version ID]``: a server-side COPY of that version onto the same key, so the
  restore is itself a new version (nothing is lost, a restore can be undone the same way).
  Default: the newest version older than the current one that is not a deletion (after a delete,
  the last version before it).
* ``log [--since 24h|ISO] [PATH]``: changes under the mount's prefix (or PATH) since a time, newest
  first, from ListObjectVersions; one HEAD per change shown (bounded by ``--limit``) for
  writer/agent. Deletions carry no metadata in S3, so their writer is unknown.

Without versioning on the bucket they raise `HistoryError` saying how to enable it. A library:
``memfs.cli.history`` parses the command lines and prints the tables.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.ops.errors import OpError
from memfs.ops.locate import Target
from memfs.ops.noise import empty_first_candidates, is_editor_temporary
from memfs.ops.versions import Version
from memfs.protocol import META_AGENT as AGENT_META
from memfs.protocol import META_MTIME
from memfs.protocol import META_RESTORED_FROM as RESTORED_FROM_META
from memfs.protocol import META_WRITER as WRITER_META
from memfs.s3.bucket import Bucket

HEAD_WORKERS = 8
DEFAULT_HISTORY_LIMIT = 50
DEFAULT_LOG_LIMIT = 200
# How many candidates for the empty first version of ``> f`` one key's history has checked
# (two HEADs each), newest first; older ones are shown as they are. A bucket writer's 1,000
# planted (empty, non-empty) pairs cost `memfs history --limit 5` 2,000 HEADs (fifth hostile
# review).
NOISE_CHECKS = 25


class HistoryError(OpError):
    """A history, restore or log that cannot be done."""


# -- reading versions ----------------------------------------------------------------------------


Warn = Callable[[str], None]


def require_versioning(s3: Bucket, target: Target, warn: Warn | None = None) -> None:
    """Raise `HistoryError` (saying how to enable it) unless the bucket keeps versions; tell
    `warn` when versioning is suspended (older changes may be gone)."""
    status = s3.versioning_status()
    if status == "Suspended":
        if warn is not None:
            warn(f"versioning is suspended on bucket {target.bucket}: writes since then "
                 "replaced the previous version instead of keeping it")
        return
    if status != "Enabled":
        endpoint = f" --endpoint-url {target.endpoint_url}" if target.endpoint_url else ""
        raise HistoryError(
            f"versioning is not enabled on bucket {target.bucket}: enable it with "
            f"aws s3api put-bucket-versioning --bucket {target.bucket} "
            f"--versioning-configuration Status=Enabled{endpoint} "
            "(versions are kept from then on)")


def _list_versions(s3: Bucket, prefix: str, *, exactly: bool = False,
                   enough: int | None = None) -> Iterable[Version]:
    """The versions under ``prefix``; ``exactly``: of the key ``prefix`` alone (``enough``:
    the pages until at least that many)."""
    for v in s3.key_versions(prefix, enough) if exactly else s3.versions(prefix):
        yield Version(key=v.key, version_id=v.version_id, time=v.modified, deleted=v.deleted,
                      latest=v.latest, size=v.size, etag=v.etag or None)


def order(entries: Sequence[Version]) -> list[Version]:
    """One key's versions and deletions, newest first.

    S3 lists a key's versions newest first, and its delete markers newest first, but in two
    separate lists with 1-second timestamps; they are merged by time. Within one second the
    current entry (IsLatest) goes first and the rest alternate between writes and deletions where
    they can (a write is what a deletion removes): an approximation only for changes made within
    the same second.
    """
    versions = [e for e in entries if not e.deleted]
    markers = [e for e in entries if e.deleted]
    out: list[Version] = []
    vi = mi = 0
    while vi < len(versions) or mi < len(markers):
        if vi == len(versions):
            out.append(markers[mi])
            mi += 1
            continue
        if mi == len(markers):
            out.append(versions[vi])
            vi += 1
            continue
        v, m = versions[vi], markers[mi]
        if v.time != m.time:
            take_marker = m.time > v.time
        elif v.latest or m.latest:
            take_marker = m.latest
        else:
            take_marker = bool(out) and not out[-1].deleted
        if take_marker:
            out.append(m)
            mi += 1
        else:
            out.append(v)
            vi += 1
    return out


def key_history(s3: Bucket, key: str, enough: int | None = None) -> list[Version]:
    """Every version and deletion of exactly `key`, newest first (no metadata yet); with
    `enough`, the newest (the listing's pages until at least that many)."""
    return order(list(_list_versions(s3, key, exactly=True, enough=enough)))


def _head_meta(s3: Bucket, v: Version) -> Version:
    if v.deleted:
        return v
    resp = s3.head(v.key, v.version_id, best_effort=True)
    if resp is None:
        return v  # gone meanwhile, or no permission: shown without writer
    meta = resp["Metadata"]
    return replace(v, writer=meta.get(WRITER_META), agent=meta.get(AGENT_META),
                   restored_from=meta.get(RESTORED_FROM_META))


#: Versions already HEADed, by (key, version id): each is asked at most once per command.
Seen = dict[tuple[str, str], Version]


def with_metadata(s3: Bucket, versions: Sequence[Version], seen: Seen | None = None
                  ) -> list[Version]:
    """`versions` with writer/agent filled in: one HEAD per stored version not in `seen`, run
    concurrently."""
    seen = {} if seen is None else seen
    todo = [v for v in versions if (v.key, v.version_id) not in seen]
    if todo:
        with ThreadPoolExecutor(max_workers=min(HEAD_WORKERS, len(todo))) as pool:
            for v in pool.map(lambda v: _head_meta(s3, v), todo):
                seen[(v.key, v.version_id)] = v
    return [seen[(v.key, v.version_id)] for v in versions]


def drop_noise(s3: Bucket, entries: Sequence[Version], seen: Seen,
               checks: int = NOISE_CHECKS) -> list[Version]:
    """One key's history without the empty first version of ``> f`` (``memfs.ops.noise``):
    two HEADs per candidate, to compare the writers, for the newest ``checks`` candidates."""
    candidates = empty_first_candidates(entries)[:checks]
    if not candidates:
        return list(entries)
    pairs = [v for i in candidates for v in (entries[i], entries[i - 1])]
    meta = {(v.key, v.version_id): v for v in with_metadata(s3, pairs, seen)}

    def writer(v: Version) -> str | None:
        return meta[(v.key, v.version_id)].writer

    drop = {i for i in candidates if writer(entries[i]) == writer(entries[i - 1])}
    return [v for i, v in enumerate(entries) if i not in drop]


# -- history --------------------------------------------------------------------------------------


def require_file(target: Target, path: str) -> Target:
    """`target` if it names a file below the prefix (history and restore work on files)."""
    if not target.rel:
        raise HistoryError(f"{path} is the root of the memory tree; give a file path", usage=True)
    return target


def not_a_file(s3: Bucket, target: Target) -> HistoryError:
    if s3.has_versions_under(target.key + "/"):
        return HistoryError(f"{target.display(target.rel)} is a directory: history, restore "
                            "and log PATH work on files (try memfs log PATH)")
    return HistoryError(f"{target.display(target.rel)} has no history in {target.url} "
                        "(never written since versioning was enabled?)")


def history(s3: Bucket, target: Target, *, limit: int = DEFAULT_HISTORY_LIMIT,
            warn: Warn | None = None, everything: bool = False) -> tuple[list[Version], int, bool]:
    """The file's versions newest first with writer/agent (at most `limit`), how many more were
    listed, and whether that is all of them; the empty first version of ``> f`` left out unless
    `everything`. Only the listing's pages up to twice `limit` entries (an empty first version
    each, dropped) are read: `--limit 5` of a key with 2,142 versions had listed them all, 3
    pages, and a bucket writer can give a key a million (thirteenth hostile review, F47)."""
    require_versioning(s3, target, warn)
    enough = 2 * max(NOISE_CHECKS, limit) + 1
    entries = key_history(s3, target.key, enough)
    if not entries:
        raise not_a_file(s3, target)
    complete = len(entries) < enough
    seen: Seen = {}
    if not everything:
        entries = drop_noise(s3, entries, seen, max(NOISE_CHECKS, limit))
    shown = with_metadata(s3, entries[:limit], seen)
    return shown, len(entries) - len(shown), complete


# -- restore --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Restored:
    source: Version
    new_version_id: str | None
    noop: bool = False
    why: str = ""  # which version was picked, in words
    skipped: int = 0  # newer versions passed over because they hold the current bytes


def _etag(v: Version) -> str:
    return (v.etag or "").strip('"')


def same_content(s3: Bucket, a: Version, b: Version) -> bool:
    """Whether two stored versions hold the same bytes: by size and ETag when they tell (equal
    ETags, or two different plain MD5 ETags), else by reading both (multipart ETags, servers
    that return none)."""
    if a.size != b.size:
        return False
    ea, eb = _etag(a), _etag(b)
    if ea and ea == eb:
        return True
    if ea and eb and "-" not in ea + eb:
        return False
    return s3.get(a.key, a.version_id) == s3.get(b.key, b.version_id)


def find_version(entries: Sequence[Version], version_id: str, display: str) -> Version:
    """The entry whose id is `version_id`, or starts with it (at least 4 characters, one
    match): ids are long, a prefix as ``git`` takes is enough."""
    exact = [v for v in entries if v.version_id == version_id]
    found = exact or ([v for v in entries if v.version_id.startswith(version_id)]
                      if len(version_id) >= 4 else [])
    if len(found) > 1:
        raise HistoryError(f"version {version_id!r} of {display} is ambiguous: "
                           f"{', '.join(v.version_id for v in found[:5])}")
    if not found:
        raise HistoryError(f"{display} has no version {version_id} (memfs history lists them)")
    return found[0]


def pick_version(entries: Sequence[Version], version_id: str | None, display: str,
                 same: Callable[[Version, Version], bool]) -> tuple[Version, str, int]:
    """The version `restore` copies back, why (in words), and how many newer versions holding
    the current bytes were passed over. Default: after a deletion, the last version before it;
    else the newest earlier version whose content differs from the current one (an editor's
    save writes the same bytes twice: restoring an identical version would change nothing)."""
    if version_id is not None:
        v = find_version(entries, version_id, display)
        if v.deleted:
            raise HistoryError(f"version {version_id} of {display} is a deletion; pick a "
                               "version with content (memfs history shows them)")
        return v, "the version named", 0
    current = entries[0]
    if current.deleted:
        for v in entries[1:]:
            if not v.deleted:
                return v, "the last version before the deletion", 0
        raise HistoryError(f"{display} has no earlier version to restore")
    skipped = 0
    for v in entries[1:]:
        if v.deleted:
            continue
        if not same(current, v):
            return v, "the last version whose content differs from the current one", skipped
        skipped += 1
    if skipped:
        raise HistoryError(f"{display}: every earlier version ({skipped}) holds the same bytes "
                           "as the current one; nothing to restore (--version ID picks one)")
    raise HistoryError(f"{display} has no earlier version to restore")


def restore(s3: Bucket, target: Target, version_id: str | None = None, *,
            writer: str | None = None, now: Callable[[], float] = time.time,
            warn: Warn | None = None) -> Restored:
    """Copy a version of the target file onto its key (server side); return what was done."""
    require_versioning(s3, target, warn)
    display = target.display(target.rel)
    entries = key_history(s3, target.key)
    if not entries:
        raise not_a_file(s3, target)
    source, why, skipped = pick_version(entries, version_id, display,
                                        lambda a, b: same_content(s3, a, b))
    if source is entries[0]:
        return Restored(source, source.version_id, noop=True, why=why)  # already current
    head = s3.head(target.key, source.version_id)
    if head is None:
        raise HistoryError(f"version {source.version_id} of {display} is gone (deleted "
                           "meanwhile); memfs history shows what is left")
    meta = dict(head["Metadata"])
    meta.pop(AGENT_META, None)
    # A restore is a write now: the file's mtime says so (and gc counts its age from here).
    meta[META_MTIME] = str(int(now()))
    meta[WRITER_META] = writer or f"{socket.gethostname()}/memfs-restore"
    meta[RESTORED_FROM_META] = source.version_id
    new_id = s3.copy_version(target.key, source.version_id, meta,
                             head.get("ContentType") or "application/octet-stream")
    source = replace(source, writer=head["Metadata"].get(WRITER_META))
    return Restored(source, new_id, why=why, skipped=skipped)


# -- log ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One write or deletion in the log."""

    path: str  # below the prefix; directories end in "/"
    action: str  # created, edited, restored, deleted, mkdir, rmdir
    version: Version

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "action": self.action, **self.version.as_json()}


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta | None:
    m = _AGE.match(text)
    if m is None:
        return None
    return timedelta(seconds=float(m.group(1)) * _UNIT[m.group(2).lower()])


def parse_since(text: str, now: datetime) -> datetime:
    """``90m``, ``24h``, ``7d``, ``2w`` before `now`, or an ISO time (without offset: UTC)."""
    age = parse_duration(text)
    if age is not None:
        return now - age
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise HistoryError(f"--since {text!r}: give an age like 30m, 24h, 7d, or an ISO time "
                           "like 2025-01-31 or 2025-01-31T09:00Z", usage=True) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def classify(entries: Sequence[Version], rel_of: Callable[[str], str]) -> list[Change]:
    """Changes of one key's history (newest first): what each entry did to the key."""
    out = []
    for i, v in enumerate(entries):
        rel = rel_of(v.key)
        is_dir = v.key.endswith("/")
        older = entries[i + 1] if i + 1 < len(entries) else None
        if v.deleted:
            action = "rmdir" if is_dir else "deleted"
        elif is_dir:
            action = "mkdir"
        elif older is None or older.deleted:
            action = "created"
        else:
            action = "edited"
        out.append(Change(rel, action, v))
    return out


def changes(s3: Bucket, target: Target, since: datetime, *, limit: int = DEFAULT_LOG_LIMIT,
            warn: Warn | None = None, everything: bool = False) -> tuple[list[Change], int]:
    """Changes under the target since `since`, newest first (at most `limit`), and how many more.

    One ListObjectVersions pass over the target (all history must be listed: S3 cannot filter
    by time), then one HEAD per write shown, for its writer and agent. Unless `everything`,
    editor temporaries and the empty first version of ``> f`` are left out (``memfs.ops.noise``;
    two HEADs per such candidate, in the keys of the changes shown).
    """
    require_versioning(s3, target, warn)
    base = target.key
    by_key: dict[str, list[Version]] = {}
    for v in _list_versions(s3, base):  # a file, or a directory's keys
        if target.rel and not (v.key == base or v.key.startswith(base + "/")):
            continue  # "notes" must not match "notes2.md"
        if not everything and v.key != base and is_editor_temporary(v.key):
            continue
        by_key.setdefault(v.key, []).append(v)
    seen: Seen = {}
    ordered = {key: order(entries) for key, entries in by_key.items()}

    def since_then(key: str) -> list[Change]:
        return [c for c in classify(ordered[key], lambda k: k[len(target.prefix):])
                if c.version.time >= since]

    by_change = {key: since_then(key) for key in ordered}
    checked: set[str] = set()
    while True:
        found = sorted((c for cs in by_change.values() for c in cs),  # stable: per-key order
                       key=lambda c: c.version.time, reverse=True)
        # Noise is looked for (two HEADs per candidate) only in keys whose changes would be
        # shown, until the shown ones are all checked: 2,000 keys with a planted (empty,
        # filled) pair each cost `log --limit 5` 4,000 HEADs (sixth hostile review, F17). The
        # count of more changes is then only an upper bound (those were not checked).
        unchecked = [] if everything else list(dict.fromkeys(
            c.version.key for c in found[:limit] if c.version.key not in checked))
        if not unchecked:
            break
        for key in unchecked:
            ordered[key] = drop_noise(s3, ordered[key], seen)
            by_change[key] = since_then(key)
            checked.add(key)
    shown, more = found[:limit], max(0, len(found) - limit)
    with_meta = with_metadata(s3, [c.version for c in shown], seen)
    out = []
    for c, v in zip(shown, with_meta, strict=True):
        action = "restored" if v.restored_from and c.action in ("created", "edited") else c.action
        out.append(Change(c.path, action, v))
    return out, more
