"""Expiry of memories by subtree: ``memfs gc`` deletes files not modified for a policy's age.

Owns the policies (``--policy session/=2h``, repeatable, or ``MEMFS_EXPIRE="session/=2h,
scratch/=7d"``; no policy: keep everything), deciding what expired, deleting it, and the report.

* **Age** is the time since the file's last modification: the newer of S3's ``LastModified`` and
  the ``x-amz-meta-mtime`` the mount keeps (what ``ls -l`` shows). The LIST gives
  ``LastModified``; only files that look expired by it are HEADed to read ``mtime`` and to confirm
  they are still the version that was listed. A file touched in between survives.
* **Scope**: a policy applies to keys under ``PREFIX + SUBTREE``, never outside them; nested
  policies (``scratch/=7d`` and ``scratch/keep/=90d``) are allowed and the longest subtree wins.
  The policy's own directory marker (``scratch/``) is never removed.
* **Directories**: a directory marker (``scratch/a/``, made by ``mkdir``) inside a policy's
  subtree is removed when it is itself older than the policy's age and everything under it is
  removed by the same run, so expiry does not leave a skeleton of empty directories; a newly
  made empty directory is kept until it is as old as a file would be.
* **Deletion** is DeleteObjects, 1,000 keys per request. On a versioned bucket that adds delete
  markers: the expired versions stay (``memfs restore`` brings them back) until a lifecycle rule
  expires noncurrent versions; the report says so.
* **Incomplete multipart uploads** under the prefix older than ``UPLOAD_AGE`` are aborted (their
  parts cost storage and no listing shows them): what a daemon killed on another machine, or
  one whose cache directory was lost, left behind. A mount aborts its own leftovers itself.
* Expiry by last access is not implemented (the mount does not record access times).

A library: ``run_gc`` reports progress to a `Progress` (this module's reports nothing; the
command line draws it on stderr) and returns a `GcReport`; ``memfs.cli.gc`` parses and prints.
The clock is injectable (``run_gc(now=...)``) for tests.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.ops.errors import S3_ERRORS, OpError
from memfs.ops.history import parse_duration
from memfs.ops.locate import Target
from memfs.ops.versions import fmt_time
from memfs.protocol import META_MTIME
from memfs.s3.bucket import DELETE_BATCH, Bucket, Listed

HEAD_WORKERS = 8
#: An incomplete multipart upload this old is someone's crash, not an upload in progress.
UPLOAD_AGE = timedelta(hours=24)


class GcError(OpError):
    """A policy that cannot work, or an expiry run that cannot be done."""


# -- policies -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    subtree: str  # relative to the prefix, ending in "/"; "" = the whole prefix
    max_age: timedelta
    age_text: str

    @property
    def label(self) -> str:
        return self.subtree or "/"


def parse_policy(spec: str) -> Policy:
    """``SUBTREE=AGE``: ``session/=2h``, ``scratch=7d``, ``/=30d`` (everything)."""
    subtree, sep, age_text = spec.strip().rpartition("=")
    if not sep or not subtree.strip():
        raise GcError(f"policy {spec!r}: expected SUBTREE=AGE, e.g. session/=2h or scratch/=7d",
                      usage=True)
    age = parse_duration(age_text)
    if age is None or age <= timedelta(0):
        raise GcError(f"policy {spec!r}: the age must be a positive number with s, m, h, d or w "
                      "(e.g. 2h, 7d)", usage=True)
    raw = subtree.strip()
    parts = [p for p in raw.split("/") if p]
    if any(p in (".", "..") for p in parts) or "\\" in raw or "\0" in raw:
        raise GcError(f"policy {spec!r}: the subtree must be a plain path below the prefix",
                      usage=True)
    if not parts and raw != "/":
        raise GcError(f"policy {spec!r}: empty subtree (write / for the whole prefix)", usage=True)
    return Policy("".join(p + "/" for p in parts), age, age_text.strip().lower())


def parse_policies(specs: Iterable[str]) -> list[Policy]:
    policies: dict[str, Policy] = {}
    for spec in specs:
        for item in re.split(r"[,\s]+", spec):
            if not item:
                continue
            p = parse_policy(item)
            if p.subtree in policies:
                raise GcError(f"two policies for {p.label}", usage=True)
            policies[p.subtree] = p
    return sorted(policies.values(), key=lambda p: p.subtree)


def policy_for(rel: str, policies: Sequence[Policy]) -> Policy | None:
    """The most specific policy whose subtree holds `rel` (a key below the prefix)."""
    best = None
    for p in policies:
        if rel.startswith(p.subtree) and (best is None or len(p.subtree) > len(best.subtree)):
            best = p
    return best


# -- progress -------------------------------------------------------------------------------------


class Progress:
    """Where ``run_gc`` reports its phases (listing, checking, deleting) and steps; this one
    reports nothing."""

    def start(self, phase: str, total: int | None = None) -> None:
        """A new phase begins, of `total` steps if known."""

    def advance(self, n: int = 1) -> None:
        """`n` more steps of the phase are done."""

    def finish(self) -> None:
        """The run is over (also after a failure)."""


# -- planning and deleting ------------------------------------------------------------------------


@dataclass
class PolicyReport:
    policy: Policy
    scanned: int = 0
    expired: int = 0
    bytes: int = 0
    dirs: int = 0
    paths: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"subtree": self.policy.label, "max_age": self.policy.age_text,
                "scanned": self.scanned, "expired": self.expired, "bytes": self.bytes,
                "dirs_removed": self.dirs, "paths": self.paths}


@dataclass
class GcReport:
    target: Target
    now: datetime
    dry_run: bool
    policies: list[PolicyReport]
    versioned: bool = False
    failed: list[tuple[str, str]] = field(default_factory=list)  # (key, reason)
    # Incomplete multipart uploads older than UPLOAD_AGE aborted (or, dry, that would be).
    stale_uploads: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"source": f"s3://{self.target.bucket}/{self.target.prefix}",
                "now": fmt_time(self.now), "dry_run": self.dry_run, "versioned": self.versioned,
                "policies": [p.as_json() for p in self.policies],
                "stale_uploads": self.stale_uploads,
                "failed": [{"key": k, "reason": r} for k, r in self.failed]}


def _list(s3: Bucket, prefix: str, progress: Progress) -> list[Listed]:
    out: list[Listed] = []
    for page in s3.pages(prefix):
        out += page
        progress.advance(len(page))
    return out


def _last_modified(s3: Bucket, obj: Listed) -> datetime | None:
    """The newer of LastModified and the mount's mtime, read now; None if the object is gone."""
    head = s3.head(obj.key)
    if head is None:
        return None
    when = head["LastModified"]
    mtime = head["Metadata"].get(META_MTIME)
    if mtime is not None:
        with contextlib.suppress(ValueError, OverflowError, OSError):
            when = max(when, datetime.fromtimestamp(float(mtime), UTC))
    return when


def _top_subtrees(policies: Sequence[Policy]) -> list[str]:
    """The subtrees to list: nested ones are covered by their ancestor's listing."""
    subtrees = sorted({p.subtree for p in policies})
    return [s for s in subtrees if not any(s != o and s.startswith(o) for o in subtrees)]


def run_gc(
    s3: Bucket,
    target: Target,
    policies: Sequence[Policy],
    *,
    now: datetime,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> GcReport:
    """Apply `policies` under the target's prefix as of `now`; return what was (or would be)
    done."""
    progress = progress or Progress()
    prefix = target.prefix
    reports = {p.subtree: PolicyReport(p) for p in policies}
    report = GcReport(target, now, dry_run, list(reports.values()))

    # 1. One LIST per top-level policy subtree.
    progress.start("listing")
    objects: list[Listed] = []
    for sub in _top_subtrees(policies):
        objects += _list(s3, prefix + sub, progress)
    objects.sort(key=lambda o: o.key)
    keys = [o.key for o in objects]

    # 2. Candidates by LastModified; then HEAD each to confirm (mtime, still the listed version).
    candidates: list[tuple[Listed, Policy]] = []
    for o in objects:
        rel = o.key[len(prefix):]
        p = policy_for(rel, policies)
        if p is None or rel == p.subtree or not o.key.startswith(prefix + p.subtree):
            continue  # the policy's own directory marker is kept
        if not o.key.endswith("/"):
            reports[p.subtree].scanned += 1
        if o.modified <= now - p.max_age:
            candidates.append((o, p))
    progress.start("checking", len(candidates))

    def check(item: tuple[Listed, Policy]) -> tuple[Listed, Policy, bool]:
        o, p = item
        when = _last_modified(s3, o)
        progress.advance()
        return o, p, when is not None and when <= now - p.max_age

    with ThreadPoolExecutor(max_workers=HEAD_WORKERS) as pool:
        checked = list(pool.map(check, candidates))
    expired_files = {o.key: (o, p) for o, p, ok in checked if ok and not o.key.endswith("/")}
    old_markers = {o.key: (o, p) for o, p, ok in checked if ok and o.key.endswith("/")}

    # 3. Old directory markers whose whole contents go in this run, deepest first.
    gone = set(expired_files)
    for key in sorted(old_markers, key=lambda k: k.count("/"), reverse=True):
        lo = bisect.bisect_right(keys, key)
        hi = bisect.bisect_left(keys, key + "\U0010ffff")
        if all(k in gone for k in keys[lo:hi]):
            gone.add(key)

    plan: list[tuple[Listed, Policy]] = []
    for key in sorted(gone):
        o, p = expired_files.get(key) or old_markers[key]
        assert key.startswith(prefix + p.subtree) and key != prefix + p.subtree
        plan.append((o, p))

    # 4. Delete in batches of 1,000.
    failed: set[str] = set()
    if not dry_run and plan:
        progress.start("deleting", len(plan))
        for i in range(0, len(plan), DELETE_BATCH):
            batch = [o.key for o, _ in plan[i:i + DELETE_BATCH]]
            for key, reason in s3.delete(batch):
                failed.add(key)
                report.failed.append((key, reason))
            progress.advance(len(batch))
    progress.finish()

    for o, p in plan:
        if o.key in failed:
            continue
        r = reports[p.subtree]
        if o.key.endswith("/"):
            r.dirs += 1
        else:
            r.expired += 1
            r.bytes += o.size
        r.paths.append(o.key[len(prefix):])
    try:
        report.versioned = s3.versioning_status() in ("Enabled", "Suspended")
    except S3_ERRORS:
        report.versioned = False

    # 5. Multipart uploads someone's crash left behind.
    for key, upload_id, initiated in list(s3.uploads(prefix)):
        if initiated <= now - UPLOAD_AGE:
            if not dry_run:
                s3.abort_upload(key, upload_id)
            report.stale_uploads += 1
    return report
