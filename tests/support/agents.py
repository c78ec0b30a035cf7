"""Agent workloads for reliability tests and ``scripts/reliability``, with models to check them.

This module owns the workloads and their bookkeeping, nothing else (no mounts, no proxies):

* :class:`SoloAgent` — one memory-tool session in its own directory ``/memories/<name>/``:
  seeded random ``create``/``str_replace``/``insert``/``view``/``delete``/``rename`` commands
  through :class:`~memfs.memory.MemoryHandler`. It keeps a model of what was *acknowledged*.
  Every view is compared with the model (read-your-writes). A failed write leaves the touched paths
  *uncertain* ({before, after}); the agent re-views them, as Claude is told to. If one turns out
  to hold the *after* state, the write landed although the command reported an error:
  ``applied_despite_error``.
* :class:`StormAgent` — agents editing the same shared files (``insert`` of new token lines,
  ``str_replace`` of their own tokens to a new version). Each token's last acknowledged version
  must be in the final bytes; a failed version must not be.
* heavy writers for crash tests: self-describing blobs (:func:`make_blob`/:func:`parse_blob`), so
  a partial or mixed object is detected by content alone.
* checks against S3 (:func:`s3_objects`, :func:`check_solo`, :func:`check_storm`) and the
  daemon's peak RSS (:func:`vm_hwm_kb`).

Everything is bounded: agents run a fixed number of commands, writers stop on an event or a count.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.memory import CommandError, MemoryHandler

ROOT = "/memories"
CONFLICT_PREFIX = ".memfs-conflicts/"

# --- outcomes ---------------------------------------------------------------------------------


def error_kind(text: str) -> str:
    """A short category for an error text the handler returned."""
    if text.startswith("Could not save"):
        m = re.search(r"\((E[A-Z]+)\)\. The command was not applied", text)
        return f"save:{m.group(1) if m else '?'}"
    if text.startswith("Could not "):
        m = re.search(r"\((E[A-Z]+)\)\.", text)  # "... (EIO)." or "... (EIO). Try again."
        return f"os:{m.group(1) if m else '?'}"
    if text.startswith("The memory directory is not available"):
        return "root:" + ("EIO" if "Input/output error" in text else "?")
    if "no longer exists" in text:
        return "vanished"
    if "does not exist" in text:
        return "missing"
    if "did not appear verbatim" in text:
        return "no_match"
    if "already exists" in text:
        return "exists"
    if "it looks binary" in text:
        return "torn"  # a text memory read as bytes of no version (issue 50, item 1)
    return "other"


@dataclass
class Stats:
    """What a workload did. ``violations`` are broken promises; each is one readable line."""

    commands: int = 0
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)  # exceptions other than CommandError
    violations: list[str] = field(default_factory=list)
    applied_despite_error: int = 0
    conflicts: int = 0  # writes refused because another writer won (designed, in storms)
    samples: dict[str, str] = field(default_factory=dict)  # first error text of each kind

    def merge(self, other: Stats) -> Stats:
        self.commands += other.commands
        self.ok += other.ok
        self.errors.update(other.errors)
        self.unexpected += other.unexpected
        self.violations += other.violations
        self.applied_despite_error += other.applied_despite_error
        self.conflicts += other.conflicts
        for k, v in other.samples.items():
            self.samples.setdefault(k, v)
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "commands": self.commands, "ok": self.ok, "errors": dict(self.errors),
            "unexpected": self.unexpected[:20], "violations": self.violations[:20],
            "applied_despite_error": self.applied_despite_error, "conflicts": self.conflicts,
            "samples": self.samples,
        }


def _run(h: MemoryHandler, cmd: Mapping[str, Any], stats: Stats,
         history: list[str] | None = None) -> tuple[bool, str]:
    """Run one command: (True, output) or (False, error text). Never raises."""
    stats.commands += 1
    ok, out = False, ""
    try:
        out = h.run(cmd)
        ok = True
    except CommandError as e:
        out = str(e)
        kind = error_kind(out)
        stats.errors[kind] += 1
        stats.samples.setdefault(kind, out[:300])
    except Exception as e:  # a crash of the handler is a finding, not a test-runner crash
        out = repr(e)
        stats.unexpected.append(f"{cmd.get('command')} {cmd.get('path')}: {out}")
        stats.errors["unexpected"] += 1
    if ok:
        stats.ok += 1
    if history is not None:
        paths = " -> ".join(str(cmd[k]) for k in ("path", "old_path", "new_path") if k in cmd)
        history.append(f"#{stats.commands} {cmd.get('command')} {paths}: "
                       f"{'ok' if ok else 'ERROR ' + out[:160]}")
    return ok, out


def parse_file_view(out: str) -> str:
    """The file content shown by a successful ``view`` of a text file (no truncation)."""
    lines = out.split("\n")[1:]
    return "\n".join(line.split("\t", 1)[1] for line in lines)


def parse_dir_view(out: str, display: str) -> set[str]:
    """Relative file paths (not directories) listed by a ``view`` of directory ``display``."""
    files = set()
    for line in out.split("\n")[1:]:
        _size, _, path = line.partition("\t")
        rel = path[len(display):].lstrip("/")
        if rel and not rel.endswith("/"):
            files.add(rel)
    return files


def insert_lines(content: str, at: int, text: str) -> str:
    """The handler's insert on content whose lines all end in a newline."""
    lines = content.split("\n")[:-1] if content else []
    lines.insert(at, text)
    return "\n".join(lines) + "\n"


# --- one agent, its own directory -------------------------------------------------------------

class SoloAgent:
    """A seeded memory session in ``/memories/<name>/`` with a model of acknowledged state.

    ``files`` maps relative paths to their acknowledged content; ``maybe`` holds paths whose state
    is one of a set (after a failed write: before or after), resolved by re-viewing them.
    """

    DIRS = ("notes", "projects/alpha")
    NAMES = tuple(f"f{i}.md" for i in range(6))

    def __init__(self, handler: MemoryHandler, name: str, seed: int) -> None:
        self.h = handler
        self.name = name
        self.rng = random.Random(seed)
        self.files: dict[str, str] = {}
        self.maybe: dict[str, tuple[str | None, str | None, bool]] = {}
        self.stats = Stats()
        self.n = 0
        self.history: list[str] = []  # one line per command, for diagnosing a finding

    def _do(self, cmd: Mapping[str, Any]) -> tuple[bool, str]:
        return _run(self.h, cmd, self.stats, self.history)

    # paths
    def display(self, rel: str) -> str:
        return f"{ROOT}/{self.name}/{rel}"

    def history_of(self, display: str, last: int = 4) -> str:
        """The last commands that named ``display``, for a finding's message."""
        return " ; ".join([line for line in self.history if display in line][-last:])

    def _fresh_line(self) -> str:
        self.n += 1
        return f"{self.name} c{self.n} {self.rng.getrandbits(32):08x}"

    def _content(self) -> str:
        return "".join(self._fresh_line() + "\n" for _ in range(self.rng.randint(1, 6)))

    def _state(self, rel: str) -> str | None:
        return self.files.get(rel)

    def _set(self, rel: str, content: str | None) -> None:
        self.maybe.pop(rel, None)
        if content is None:
            self.files.pop(rel, None)
        else:
            self.files[rel] = content

    def _uncertain(self, rel: str, before: str | None, after: str | None,
                   single: bool = True) -> None:
        """``single``: one object write (it must land all or not at all, as the error says)."""
        self.maybe[rel] = (before, after, single)
        self.files.pop(rel, None)

    def _certain_files(self) -> list[str]:
        return sorted(self.files)

    # one step
    def step(self) -> None:
        if self.maybe:
            self._resolve(sorted(self.maybe)[0])
            return
        r = self.rng.random()
        certain = self._certain_files()
        if not certain or r < 0.22:
            self._create()
        elif r < 0.42:
            self._str_replace(self.rng.choice(certain))
        elif r < 0.58:
            self._insert(self.rng.choice(certain))
        elif r < 0.78:
            self._view_file(self.rng.choice(certain))
        elif r < 0.85:
            self._view_dir()
        elif r < 0.92:
            self._rename(self.rng.choice(certain))
        else:
            self._delete(self.rng.choice(certain))

    def run(self, commands: int, stop: threading.Event | None = None) -> Stats:
        for _ in range(commands * 3):  # some steps choose nothing to do; bounded all the same
            if self.stats.commands >= commands or (stop is not None and stop.is_set()):
                break
            self.step()
        # Settle what is still uncertain (bounded: a few views per path).
        for _ in range(3):
            for rel in sorted(self.maybe):
                self._resolve(rel)
        return self.stats

    def _write_failed(self, rel: str, before: str | None, after: str | None) -> None:
        self._uncertain(rel, before, after, single=True)

    def _create(self) -> None:
        rel = f"{self.rng.choice(self.DIRS)}/{self.rng.choice(self.NAMES)}"
        if rel in self.maybe:
            return
        text = self._content()
        before = self._state(rel)
        ok, out = self._do({"command": "create", "path": self.display(rel),
                                "file_text": text})
        if ok:
            self._set(rel, text)
        elif out.startswith("Could not save"):
            self._write_failed(rel, before, text)
        # other errors (e.g. an EIO on the parent lookup) changed nothing we model

    def _str_replace(self, rel: str) -> None:
        before = self.files[rel]
        lines = before.split("\n")[:-1]
        old = self.rng.choice(lines)
        new = self._fresh_line()
        after = before.replace(old, new, 1)
        ok, out = self._do({"command": "str_replace", "path": self.display(rel),
                                "old_str": old, "new_str": new})
        if ok:
            self._set(rel, after)
        elif out.startswith("Could not save"):
            self._write_failed(rel, before, after)
        elif "did not appear verbatim" in out or "does not exist" in out:
            self.stats.violations.append(f"str_replace {self.display(rel)}: acknowledged "
                                         f"content not found: {out[:200]}")
            self._uncertain(rel, before, before, single=False)

    def _insert(self, rel: str) -> None:
        before = self.files[rel]
        n = before.count("\n")
        at = self.rng.randint(0, n)
        text = self._fresh_line()
        after = insert_lines(before, at, text)
        ok, out = self._do({"command": "insert", "path": self.display(rel),
                                "insert_line": at, "insert_text": text})
        if ok:
            self._set(rel, after)
        elif out.startswith("Could not save"):
            self._write_failed(rel, before, after)
        elif "Invalid `insert_line`" in out or "does not exist" in out:
            self.stats.violations.append(f"insert {self.display(rel)} at {at}: model has {n} "
                                         f"lines: {out[:200]}")

    def _view_file(self, rel: str) -> None:
        ok, out = self._do({"command": "view", "path": self.display(rel)})
        if ok:
            seen = parse_file_view(out)
            if seen != self.files[rel]:
                self.stats.violations.append(
                    f"view {self.display(rel)}: stale or wrong content {seen[:120]!r}, "
                    f"acknowledged {self.files[rel][:120]!r}")
                self._set(rel, seen)
        elif "does not exist" in out:
            self.stats.violations.append(f"view {self.display(rel)}: acknowledged file missing")
            self._set(rel, None)

    def _view_dir(self) -> None:
        display = f"{ROOT}/{self.name}"
        ok, out = self._do({"command": "view", "path": display})
        if not ok:
            return
        listed = parse_dir_view(out, display)
        # The view shows two levels below the agent's directory.
        known = {rel for rel in self.files if rel.count("/") <= 1}
        unsure = set(self.maybe)
        if (listed - unsure) != known:
            odd = sorted((listed - unsure) ^ known)
            self.stats.violations.append(
                f"view {display}: lists {sorted(listed - unsure)}, acknowledged {sorted(known)}"
                " | history: " + " ; ".join(self.history_of(self.display(rel)) for rel in odd))

    def _rename(self, rel: str) -> None:
        dst = f"{self.rng.choice(self.DIRS)}/{self.rng.choice(self.NAMES)}"
        if dst == rel or dst in self.files or dst in self.maybe:
            return
        content = self.files[rel]
        ok, out = self._do({"command": "rename", "old_path": self.display(rel),
                                "new_path": self.display(dst)})
        if ok:
            self._set(rel, None)
            self._set(dst, content)
        elif "already exists" in out:
            self.stats.violations.append(f"rename to {self.display(dst)}: destination the "
                                         "model says is free exists")
        else:
            # COPY then DELETE: a failure between them leaves both (SEMANTICS.md: never lost).
            self._uncertain(rel, content, None, single=False)
            self._uncertain(dst, None, content, single=False)

    def _delete(self, rel: str) -> None:
        before = self.files[rel]
        ok, out = self._do({"command": "delete", "path": self.display(rel)})
        if ok:
            self._set(rel, None)
        elif "does not exist" in out:
            self.stats.violations.append(f"delete {self.display(rel)}: acknowledged file missing")
            self._set(rel, None)
        else:
            self._uncertain(rel, before, None)

    def _resolve(self, rel: str) -> None:
        """Re-view an uncertain path; its state must be its before or its after state."""
        before, after, single = self.maybe[rel]
        ok, out = self._do({"command": "view", "path": self.display(rel)})
        if ok:
            seen: str | None = parse_file_view(out)
        elif "does not exist" in out:
            seen = None
        else:
            return  # could not look (a fault): try again later
        if seen not in (before, after):
            self.stats.violations.append(
                f"{self.display(rel)} after a failed command holds {(seen or '')[:120]!r}, "
                f"neither the state before {(before or '')[:60]!r} nor after it | history: "
                + self.history_of(self.display(rel)))
        elif single and seen == after and after != before:
            # One write that reported an error yet landed: the error was not the truth.
            self.stats.applied_despite_error += 1
        self._set(rel, seen)

    def expected(self) -> dict[str, set[str | None]]:
        """Key (relative to the mount root) → allowed contents (None = absent)."""
        out: dict[str, set[str | None]] = {}
        for rel, content in self.files.items():
            out[f"{self.name}/{rel}"] = {content}
        for rel, (before, after, _single) in self.maybe.items():
            out[f"{self.name}/{rel}"] = {before, after}
        return out


# --- agents editing the same files ------------------------------------------------------------


def token_line(agent: str, k: int, version: int) -> str:
    return f"<{agent}#{k} v{version}>"


_TOKEN_RE = re.compile(r"<([^#<>]+)#(\d+) v(\d+)>")


class StormAgent:
    """Edits shared files with ``insert`` (a new token line) and ``str_replace`` (its own token to
    the next version). ``acked[(path, k)]`` is the last acknowledged version of each token;
    ``failed`` holds versions whose write reported an error (they must not be in the file)."""

    def __init__(self, handler: MemoryHandler, name: str, paths: list[str], seed: int) -> None:
        self.h = handler
        self.name = name
        self.paths = paths
        self.rng = random.Random(seed)
        self.acked: dict[tuple[str, int], int] = {}
        self.failed: set[tuple[str, int, int]] = set()
        self.stats = Stats()
        self.k = 0

    def step(self) -> None:
        path = self.rng.choice(self.paths)
        mine = [key for key in self.acked if key[0] == path]
        if mine and self.rng.random() < 0.5:
            key = self.rng.choice(mine)
            v = self.acked[key]
            old, new = token_line(self.name, key[1], v), token_line(self.name, key[1], v + 1)
            ok, out = _run(self.h, {"command": "str_replace", "path": path, "old_str": old,
                                    "new_str": new}, self.stats)
            if ok:
                self.acked[key] = v + 1
            elif out.startswith("Could not save"):
                self.stats.conflicts += 1
                self.failed.add((path, key[1], v + 1))
                if "view" not in out or "retry" not in out:
                    self.stats.violations.append(f"conflict error does not say re-read: {out}")
            elif "did not appear verbatim" in out:
                # Lost, or a stale read: the final check of the object tells which.
                self.stats.violations.append(
                    f"{path}: str_replace did not find its acknowledged {old}")
            return
        ok, out = _run(self.h, {"command": "view", "path": path}, self.stats)
        if not ok:
            return
        n = parse_file_view(out).count("\n")
        self.k += 1
        line = token_line(self.name, self.k, 0)
        ok, out = _run(self.h, {"command": "insert", "path": path,
                                "insert_line": self.rng.randint(0, n), "insert_text": line},
                       self.stats)
        if ok:
            self.acked[(path, self.k)] = 0
        elif out.startswith("Could not save"):
            self.stats.conflicts += 1
            self.failed.add((path, self.k, 0))

    def run(self, commands: int, stop: threading.Event | None = None) -> Stats:
        while self.stats.commands < commands:
            if stop is not None and stop.is_set():
                break
            self.step()
        return self.stats


def check_storm(agents: Iterable[StormAgent], final: Mapping[str, bytes],
                key_of: Callable[[str], str]) -> tuple[list[str], int]:
    """Problems and bytes lost: every acknowledged token version must be in the final object
    (``final`` by key, ``key_of`` maps a /memories path to its key); failed ones must not be."""
    problems: list[str] = []
    lost_bytes = 0
    present: dict[str, dict[tuple[str, int], list[int]]] = {}
    for key, data in final.items():
        seen: dict[tuple[str, int], list[int]] = {}
        for m in _TOKEN_RE.finditer(data.decode("utf-8", "replace")):
            seen.setdefault((m.group(1), int(m.group(2))), []).append(int(m.group(3)))
        present[key] = seen
    for a in agents:
        for (path, k), v in a.acked.items():
            versions = present.get(key_of(path), {}).get((a.name, k), [])
            if versions != [v]:
                problems.append(f"{path}: token {a.name}#{k} acknowledged at v{v}, "
                                f"final has {versions}")
                if v not in versions:
                    lost_bytes += len(token_line(a.name, k, v)) + 1
        for path, k, v in a.failed:
            if v in present.get(key_of(path), {}).get((a.name, k), []) and \
                    a.acked.get((path, k)) != v:
                problems.append(f"{path}: {a.name}#{k} v{v} was reported failed but is there")
    return problems, lost_bytes


# --- checks against S3 ------------------------------------------------------------------------


def s3_objects(s3: Any, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object under ``prefix`` (keys relative to it), bodies included."""
    out: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", ()):
            key = obj["Key"]
            out[key[len(prefix):]] = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return out


def memory_objects(objects: Mapping[str, bytes]) -> dict[str, bytes]:
    """Objects that are memory files: no directory markers, no conflict copies."""
    return {k: v for k, v in objects.items()
            if not k.endswith("/") and not k.startswith(CONFLICT_PREFIX)}


def conflict_objects(objects: Mapping[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in objects.items() if k.startswith(CONFLICT_PREFIX)}


def check_solo(agents: Iterable[SoloAgent], objects: Mapping[str, bytes]) -> list[str]:
    """S3 must hold exactly the acknowledged state of every agent's directory."""
    files = memory_objects(objects)
    problems = []
    for a in agents:
        expected = a.expected()
        mine = {k: v for k, v in files.items() if k.startswith(a.name + "/")}
        for key, allowed in expected.items():
            data = mine.get(key)
            got = None if data is None else data.decode("utf-8", "replace")
            if got not in allowed:
                want = " or ".join("absent" if s is None else repr(s[:80]) for s in allowed)
                problems.append(f"{key}: S3 has {'nothing' if got is None else repr(got[:80])}, "
                                f"acknowledged {want}")
        for key in sorted(set(mine) - set(expected)):
            problems.append(f"{key}: in S3 but never acknowledged")
        for i, problem in enumerate(problems):
            key = problem.split(":", 1)[0]
            related = a.history_of(f"{ROOT}/{key}")
            if related:
                problems[i] = problem + " | history: " + related
    return problems


def solo_lost_bytes(agents: Iterable[SoloAgent], objects: Mapping[str, bytes]) -> int:
    """Bytes of acknowledged content that S3 does not hold (0 is the promise)."""
    files = memory_objects(objects)
    lost = 0
    for a in agents:
        for rel, content in a.files.items():
            data = files.get(f"{a.name}/{rel}")
            if data is None or data.decode("utf-8", "replace") != content:
                lost += len(content.encode())
    return lost


# --- heavy writers (crash tests) --------------------------------------------------------------

_BLOB_MAGIC = b"memfs-blob"


def make_blob(name: str, version: int, size: int) -> bytes:
    """Self-describing bytes: a header with name, version, length and digest, then payload."""
    seed = hashlib.sha256(f"{name}:{version}".encode()).digest()
    payload = (seed * (size // len(seed) + 1))[:size]
    digest = hashlib.sha256(payload).hexdigest()
    return b"%s %s %d %d %s\n" % (_BLOB_MAGIC, name.encode(), version, size,
                                   digest.encode()) + payload


def parse_blob(data: bytes) -> tuple[str, int]:
    """(name, version) of a complete blob; ValueError for anything partial or mixed."""
    head, sep, payload = data.partition(b"\n")
    parts = head.split(b" ")
    if not sep or len(parts) != 5 or parts[0] != _BLOB_MAGIC:
        raise ValueError(f"not a blob header: {head[:80]!r}")
    size = int(parts[3])
    if len(payload) != size or hashlib.sha256(payload).hexdigest().encode() != parts[4]:
        raise ValueError(f"blob {parts[1]!r} v{int(parts[2])}: payload is not complete "
                         f"({len(payload)} of {size} bytes)")
    return parts[1].decode(), int(parts[2])


@dataclass
class WriterLog:
    """Per file: the last version whose close() returned success, and the one in flight."""

    acked: dict[str, int] = field(default_factory=dict)
    attempted: dict[str, int] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    writes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def heavy_writer(root: Path, name: str, size: int, log: WriterLog, stop: threading.Event,
                 max_writes: int = 10_000) -> None:
    """Rewrite ``root/name`` with new blob versions until ``stop`` or the first error."""
    version = log.acked.get(name, -1)
    for _ in range(max_writes):
        if stop.is_set():
            return
        version += 1
        with log.lock:
            log.attempted[name] = version
        try:
            with open(root / name, "wb") as f:
                f.write(make_blob(name, version, size))
        except OSError as e:
            with log.lock:
                log.errors[os.strerror(e.errno or 0)] += 1
            return
        with log.lock:
            log.acked[name] = version
            log.writes += 1


def check_blobs(log: WriterLog, objects: Mapping[str, bytes], prefix: str = "") -> list[str]:
    """Every object is a complete blob; every acknowledged version (or the next, which was in
    flight) is what S3 holds."""
    problems = []
    for key, data in objects.items():
        if key.endswith("/") or key.startswith(CONFLICT_PREFIX):
            continue
        try:
            parse_blob(data)
        except ValueError as e:
            problems.append(f"{key}: {e}")
    for name, acked in log.acked.items():
        data = objects.get(prefix + name)
        if data is None:
            problems.append(f"{name}: v{acked} acknowledged, object missing")
            continue
        try:
            _n, v = parse_blob(data)
        except ValueError:
            continue  # reported above
        if v < acked or v > log.attempted.get(name, acked):
            problems.append(f"{name}: acknowledged v{acked}, S3 holds v{v}")
    return problems


# --- the daemon -------------------------------------------------------------------------------


def vm_hwm_kb(pid: int) -> int:
    """Peak resident set size of a process (VmHWM), in KiB; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def run_threads(targets: list[Callable[[], Any]], timeout_s: float) -> list[str]:
    """Run callables in threads, join with a deadline; names of those still running after it."""
    threads = [threading.Thread(target=t, daemon=True, name=f"agent-{i}")
               for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]
