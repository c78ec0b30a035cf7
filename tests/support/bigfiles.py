"""Big-file workloads for reliability tests and ``scripts/reliability``, with checks against S3.

Big means above the mount's ``--part-size``: written as multipart uploads completed with
``If-Match``/``If-None-Match: *``, read in ranges. This module owns the workloads, their models
and their checks (no mounts, no daemons), like :mod:`tests.support.agents` does for memory files:

* :class:`BigFile` — the bytes of one big test file: a fixed pattern (each MiB different) in
  which every writer owns a marker region of 4 KiB, far apart (different parts). A version is the
  tuple of the writers' marker sequence numbers, so its SHA-256 is known without holding it.
* :class:`BigStormWriter` — two mounts rewriting one big file in place (``r+b``: read the marker
  regions, write its own, close), many times. :func:`check_big_storm`: the acknowledged versions
  form one chain from the initial one (each built on the one before it — so no acknowledged write
  was lost), the final object is the chain's last, and every close that failed with ESTALE has its
  whole file under ``.memfs-conflicts/`` (compared by SHA-256).
* :class:`BigFaultWriter` — one mount writing and patching big files under S3 faults: after every
  attempt S3 (read behind the proxy) holds the last acknowledged version, never a failed one.

S3 is read with boto3 in streaming mode (:func:`s3_digest`): a 64 MiB object costs no 64 MiB
buffer, and conflict copies are compared by digest.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.agents import CONFLICT_PREFIX

MIB = 1024 * 1024
REGION = 4096  # one writer's marker region


def pattern(size: int, seed: str) -> bytes:
    """``size`` bytes that differ at every MiB (its index leads each MiB), so a range fetched
    for the wrong offset, or from another file, cannot pass for the right one."""
    block = hashlib.sha256(seed.encode()).digest() * (MIB // 32)
    return b"".join(i.to_bytes(8, "big") + block[8:]
                    for i in range(-(-size // MIB)))[:size]


class BigFile:
    """One big file: ``pattern(size, key)`` with a marker region per writer (see the module
    docstring). A version is a tuple of sequence numbers, one per writer, in ``writers`` order."""

    def __init__(self, key: str, size: int, writers: Sequence[str]) -> None:
        if size < 2 * REGION * len(writers):
            raise ValueError(f"{size} bytes is too small for {len(writers)} marker regions")
        self.key = key
        self.size = size
        self.writers = tuple(writers)
        self.template = pattern(size, key)
        n = len(self.writers)
        # The middle of each writer's stretch, off any MiB (and so part) boundary.
        self.offsets = {w: (2 * i + 1) * size // (2 * n) + 12345 - REGION for i, w in
                        enumerate(self.writers)}
        self.initial = (0,) * n

    def marker(self, writer: str, seq: int) -> bytes:
        line = f"<memfs-big {self.key} {writer} seq={seq:010d}>\n".encode()
        return (line * (REGION // len(line) + 1))[:REGION]

    def parse(self, writer: str, data: bytes) -> int | None:
        """The sequence number in ``writer``'s region, None if the bytes are not one whole
        marker of that writer (torn, mixed or misplaced)."""
        m = re.match(rb"<memfs-big (\S+) (\S+) seq=(\d{10})>\n", data)
        if m is None or m[1].decode() != self.key or m[2].decode() != writer:
            return None
        seq = int(m[3])
        return seq if data == self.marker(writer, seq) else None

    def _pieces(self, version: Sequence[int]) -> Iterable[bytes | memoryview]:
        view = memoryview(self.template)
        pos = 0
        for w, seq in sorted(zip(self.writers, version, strict=True),
                             key=lambda ws: self.offsets[ws[0]]):
            off = self.offsets[w]
            yield view[pos:off]
            yield self.marker(w, seq)
            pos = off + REGION
        yield view[pos:]

    def build(self, version: Sequence[int]) -> bytes:
        return b"".join(self._pieces(version))

    def digest(self, version: Sequence[int]) -> str:
        h = hashlib.sha256()
        for piece in self._pieces(version):
            h.update(piece)
        return h.hexdigest()


def write_whole(path: Path, data: bytes, chunk: int = MIB) -> None:
    """Create or truncate ``path`` and write ``data`` in ``chunk``-sized writes, then close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            pos += os.write(fd, view[pos:pos + chunk])
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)


def errname(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno))


# --- S3 ---------------------------------------------------------------------------------------


def s3_digest(s3: Any, bucket: str, key: str) -> str | None:
    """SHA-256 of an object, streamed; None if there is none."""
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    except s3.exceptions.NoSuchKey:
        return None
    h = hashlib.sha256()
    for chunk in body.iter_chunks(MIB):
        h.update(chunk)
    return h.hexdigest()


def conflict_digests(s3: Any, bucket: str, key: str) -> Counter[str]:
    """SHA-256 of every conflict copy kept for ``key`` (``.memfs-conflicts/<key>.<stamp>...``)."""
    out: Counter[str] = Counter()
    prefix = f"{CONFLICT_PREFIX}{key}."
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", ()):
            digest = s3_digest(s3, bucket, obj["Key"])
            if digest is not None:
                out[digest] += 1
    return out


def incomplete_uploads(s3: Any, bucket: str) -> list[str]:
    """Keys of the multipart uploads S3 holds open (never completed, never aborted)."""
    keys = []
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        keys += [u["Key"] for u in page.get("Uploads", ())]
    return keys


def s3_objects_except(s3: Any, bucket: str, big_keys: Iterable[str]) -> dict[str, bytes]:
    """Every object with its bytes, except big files and their conflict copies (those are
    checked by digest): what the small-file checks of :mod:`tests.support.agents` read."""
    skip = tuple(big_keys)
    skip_copies = tuple(f"{CONFLICT_PREFIX}{k}." for k in skip)
    out: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", ()):
            key = obj["Key"]
            if key in skip or key.startswith(skip_copies):
                continue
            out[key] = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return out


# --- two mounts rewriting one big file --------------------------------------------------------


@dataclass
class BigAttempt:
    """One rewrite: ``outcome`` is ``acked``, ``conflict`` (close failed with ESTALE) or
    ``<stage>:<ERRNO>`` (stage: open, read, write, close). ``base`` is the version the writer's
    handle held (the markers it read), ``version`` what it meant S3 to hold, ``digest`` that
    version's SHA-256."""

    writer: str
    seq: int
    outcome: str
    base: tuple[int, ...] | None = None
    version: tuple[int, ...] | None = None
    digest: str | None = None
    seconds: float = 0.0


@dataclass
class BigStats:
    attempts: int = 0
    acked: int = 0
    conflicts: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    applied_despite_error: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def count(self, outcome: str, seconds: float) -> None:
        self.attempts += 1
        self.seconds.append(seconds)
        if outcome == "acked":
            self.acked += 1
        else:
            self.errors[outcome] += 1
            if outcome == "conflict":
                self.conflicts += 1

    def merge(self, other: BigStats) -> BigStats:
        self.attempts += other.attempts
        self.acked += other.acked
        self.conflicts += other.conflicts
        self.errors.update(other.errors)
        self.applied_despite_error += other.applied_despite_error
        self.violations += other.violations
        self.seconds += other.seconds
        return self

    def as_dict(self) -> dict[str, Any]:
        s = sorted(self.seconds)
        return {"attempts": self.attempts, "acked": self.acked, "conflicts": self.conflicts,
                "errors": dict(self.errors), "applied_despite_error": self.applied_despite_error,
                "violations": self.violations[:20],
                "median_s": round(s[len(s) // 2], 2) if s else None,
                "max_s": round(s[-1], 2) if s else None}


class BigStormWriter:
    """Rewrites ``big`` through the mount at ``root`` in place, as writer ``writer``: open
    ``O_RDWR``, read every writer's marker region (the version this handle holds), write its own
    marker with the next sequence number, close. A failed step ends the attempt; nothing is
    retried (the next attempt starts over). Between attempts it pauses up to ``pause_s``
    (default: about as long as a rewrite of that size takes on loopback), so that the other
    writer's rewrite, which may have to fetch the file first, is not always overtaken."""

    def __init__(self, root: Path, big: BigFile, writer: str, seed: int,
                 pause_s: float | None = None) -> None:
        self.root = root
        self.big = big
        self.writer = writer
        self.index = big.writers.index(writer)
        self.rng = random.Random(seed)
        self.pause_s = 0.3 + 0.04 * big.size / MIB if pause_s is None else pause_s
        self.attempts: list[BigAttempt] = []
        self.stats = BigStats()

    def run(self, rewrites: int, stop: threading.Event | None = None) -> BigStats:
        for seq in range(1, rewrites + 1):
            if stop is not None and stop.is_set():
                break
            self.attempt(seq)
            time.sleep(self.rng.uniform(0, self.pause_s))  # vary the interleavings
        return self.stats

    def _record(self, a: BigAttempt, started: float) -> None:
        a.seconds = time.monotonic() - started
        self.attempts.append(a)
        self.stats.count(a.outcome, a.seconds)

    def attempt(self, seq: int) -> None:
        big, started = self.big, time.monotonic()
        try:
            fd = os.open(self.root / big.key, os.O_RDWR)
        except OSError as e:
            self._record(BigAttempt(self.writer, seq, f"open:{errname(e)}"), started)
            return
        wrote = False
        try:
            try:
                seen = [big.parse(w, os.pread(fd, REGION, big.offsets[w])) for w in big.writers]
            except OSError as e:
                self._record(BigAttempt(self.writer, seq, f"read:{errname(e)}"), started)
                return
            if None in seen:
                self.stats.violations.append(
                    f"{big.key}: {self.writer} read a torn or foreign marker region: {seen}")
                return
            base = tuple(s for s in seen if s is not None)
            version = (*base[:self.index], seq, *base[self.index + 1:])
            a = BigAttempt(self.writer, seq, "", base, version, big.digest(version))
            try:
                n = os.pwrite(fd, big.marker(self.writer, seq), big.offsets[self.writer])
            except OSError as e:
                a.outcome = f"write:{errname(e)}"  # refused before any byte changed
                self._record(a, started)
                return
            if n != REGION:
                self.stats.violations.append(f"{big.key}: short write {n} of {REGION}")
            wrote = True
            try:
                os.close(fd)
                a.outcome = "acked"
            except OSError as e:
                a.outcome = "conflict" if e.errno == errno.ESTALE else f"close:{errname(e)}"
            self._record(a, started)
        finally:
            if not wrote:
                try:
                    os.close(fd)
                except OSError as e:  # nothing was written: nothing may fail to upload
                    self.stats.violations.append(
                        f"{big.key}: close without a write failed: {errname(e)}")


def check_big_storm(big: BigFile, attempts: Iterable[BigAttempt], final: str | None,
                    copies: Mapping[str, int]) -> tuple[list[str], int]:
    """Problems and acknowledged bytes lost, given every writer's attempts, the SHA-256 of the
    final object and the digests of the conflict copies kept for it (see the module docstring).

    Each acknowledged close was conditional on the version its handle held, so the acknowledged
    versions must form one chain from the initial version, no two built on the same one (that
    would be a lost update), and S3 must end with the chain's last. Lost bytes count the markers
    of acknowledged versions off the chain (their writes are gone)."""
    attempts = list(attempts)
    problems: list[str] = []
    acked = [a for a in attempts if a.outcome == "acked"]
    on: dict[tuple[int, ...], list[BigAttempt]] = {}
    for a in acked:
        assert a.base is not None
        on.setdefault(a.base, []).append(a)
    for base, group in on.items():
        if len(group) > 1:
            who = ", ".join(f"{a.writer}#{a.seq}" for a in group)
            problems.append(f"{big.key}: {who} were all acknowledged on version {base}: "
                            "all but one replaced a version they never saw (lost update)")
    chain: list[BigAttempt] = []
    current = big.initial
    while current in on and len(chain) < len(acked):
        nxt = on[current][0]
        chain.append(nxt)
        assert nxt.version is not None
        current = nxt.version
    off_chain = [a for a in acked if a not in chain]
    for a in off_chain:
        problems.append(f"{big.key}: {a.writer}#{a.seq} acknowledged on version {a.base}, which "
                        "S3 never held in the chain of acknowledged versions")
    lost = REGION * len(off_chain)
    want = big.digest(current)
    if final != want:
        known = {a.digest: f"{a.writer}#{a.seq} ({a.outcome})" for a in attempts if a.digest}
        known[big.digest(big.initial)] = "the initial version"
        problems.append(f"{big.key}: S3 ends with {known.get(final, final)}, the last "
                        f"acknowledged version is {current}")
        lost += REGION
    left = Counter(copies)
    for a in attempts:
        if a.outcome != "conflict":
            continue
        if left[a.digest or ""] > 0:
            left[a.digest or ""] -= 1
        else:
            problems.append(f"{big.key}: {a.writer}#{a.seq} lost its race (ESTALE) but its "
                            f"file is not under {CONFLICT_PREFIX}")
    extra = sum(left.values())
    if extra:
        problems.append(f"{big.key}: {extra} conflict cop(ies) match no lost race's bytes")
    return problems, lost


# --- one mount writing big files under faults -------------------------------------------------


class BigFaultWriter:
    """Writes and patches big files through the mount at ``root`` while S3 faults: a whole
    rewrite (``O_TRUNC``, 1 MiB writes) or an in-place patch (``r+b``: read the marker, which
    must be the last acknowledged one, write the next). After every attempt, S3 — read with
    ``s3`` behind the proxy, so without faults — must hold the last acknowledged version of the
    file (nothing if none): an acknowledged write is there with every byte right; a failed one
    is not (else ``applied_despite_error``).

    Now and then (``external_share``) a new version is put with ``s3`` directly, behind the
    mount's back, and the writer waits out the mount's metadata TTL (``ttl_s``): the next patch
    must then read that version in ranges and fetch the rest of it under faults, so a version
    that mixed bytes of two would show in its digest. Nobody else touches these files."""

    def __init__(self, root: Path, files: Sequence[BigFile], s3: Any, bucket: str,
                 seed: int, rewrite_share: float = 0.3, external_share: float = 0.15,
                 ttl_s: float = 0.5) -> None:
        self.root = root
        self.files = list(files)
        self.s3 = s3
        self.bucket = bucket
        self.rng = random.Random(seed)
        self.rewrite_share = rewrite_share
        self.external_share = external_share
        self.ttl_s = ttl_s
        self.external_writes = 0
        self.acked: dict[str, int | None] = {f.key: None for f in self.files}
        self.unknown: set[str] = set()  # a rewrite's write() failed: S3 may hold a prefix
        self.stats = BigStats()
        self.problems: list[str] = []
        self.bytes_verified = 0
        self.seq = 0

    def run(self, min_attempts: int, stop: threading.Event, max_attempts: int = 1000) -> BigStats:
        """Until ``stop`` is set and at least ``min_attempts`` were made (or ``max_attempts``)."""
        while self.stats.attempts < max_attempts and (
                not stop.is_set() or self.stats.attempts < min_attempts):
            self.step()
        return self.stats

    def step(self) -> None:
        big = self.rng.choice(self.files)
        if big.key in self.unknown:
            return
        self.seq += 1
        r = self.rng.random()
        if self.acked[big.key] is not None and r < self.external_share:
            self.s3.put_object(Bucket=self.bucket, Key=big.key, Body=big.build((self.seq,)))
            self.acked[big.key] = self.seq
            self.external_writes += 1
            time.sleep(self.ttl_s + 0.2)  # past the mount's TTL: its next open asks S3
            return
        started = time.monotonic()
        if self.acked[big.key] is None or r < self.external_share + self.rewrite_share:
            outcome = self._rewrite(big, self.seq)
        else:
            outcome = self._patch(big, self.seq)
        self.stats.count(outcome, time.monotonic() - started)
        self.check(big, failed=None if outcome == "acked" else self.seq)

    def _rewrite(self, big: BigFile, seq: int) -> str:
        try:
            fd = os.open(self.root / big.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            return f"open:{errname(e)}"
        data = memoryview(big.build((seq,)))
        pos = 0
        try:
            while pos < len(data):
                pos += os.write(fd, data[pos:pos + MIB])
        except OSError as e:
            # A rewrite stages on disk: no S3 request, nothing that faults should fail.
            self.problems.append(f"{big.key}: write() of a rewrite failed at {pos}: "
                                 f"{errname(e)}")
            self.unknown.add(big.key)
            with contextlib.suppress(OSError):
                os.close(fd)
            return f"write:{errname(e)}"
        try:
            os.close(fd)
        except OSError as e:
            return f"close:{errname(e)}"
        self.acked[big.key] = seq
        return "acked"

    def _patch(self, big: BigFile, seq: int) -> str:
        (w,) = big.writers
        try:
            fd = os.open(self.root / big.key, os.O_RDWR)
        except OSError as e:
            return f"open:{errname(e)}"
        wrote = False
        try:
            try:
                seen = big.parse(w, os.pread(fd, REGION, big.offsets[w]))
            except OSError as e:
                return f"read:{errname(e)}"
            if seen != self.acked[big.key]:
                self.stats.violations.append(f"{big.key}: read v{seen}, the last acknowledged "
                                             f"version is v{self.acked[big.key]}")
            try:
                os.pwrite(fd, big.marker(w, seq), big.offsets[w])
            except OSError as e:
                return f"write:{errname(e)}"
            wrote = True
            try:
                os.close(fd)
            except OSError as e:
                return f"close:{errname(e)}"
            self.acked[big.key] = seq
            return "acked"
        finally:
            if not wrote:
                try:
                    os.close(fd)
                except OSError as e:
                    self.problems.append(f"{big.key}: close without a write failed: "
                                         f"{errname(e)}")

    def check(self, big: BigFile, failed: int | None = None) -> None:
        """S3 holds the last acknowledged version of ``big`` (``failed``: the attempt that just
        reported an error, whose bytes must not be there)."""
        if big.key in self.unknown:
            return
        got = s3_digest(self.s3, self.bucket, big.key)
        acked = self.acked[big.key]
        want = None if acked is None else big.digest((acked,))
        if got == want:
            if got is not None:
                self.bytes_verified += big.size
            return
        if failed is not None and got == big.digest((failed,)):
            self.stats.applied_despite_error += 1  # the error was not the truth
            self.acked[big.key] = failed
            return
        self.problems.append(f"{big.key}: S3 holds {got and got[:12]}, the last acknowledged "
                             f"version v{acked} is {want and want[:12]}")
        self.unknown.add(big.key)

    def lost_bytes(self) -> int:
        """Bytes of acknowledged versions S3 does not hold now (whole files: a wrong byte
        anywhere loses the version). Files whose state is unknown are problems already."""
        lost = 0
        for big in self.files:
            acked = self.acked[big.key]
            if acked is not None and big.key not in self.unknown and \
                    s3_digest(self.s3, self.bucket, big.key) != big.digest((acked,)):
                lost += big.size
        return lost
