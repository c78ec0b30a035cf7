"""The benchmark's workloads and how each command is measured.

Owns three workloads and their clients:

* **session** — a fixed memory-tool session over N files (create, view file, str_replace,
  insert, view directory, rename, delete), driven through memfs's ``MemoryHandler``, the SDK's
  ``BetaLocalFilesystemMemoryTool`` on any directory, or ``Floor``: the fewest S3 requests the
  same session needs done straight with boto3, cold (no cache carried between commands);
* **shell** — ``cp -r`` of many small files into a directory, ``ls -lR``, ``grep -r``, ``rm -r``;
* **scale** — one directory of many files: ``ls -l`` and the handler's directory view.

Every command is timed and charged the proxy's request counts that arrived while it ran.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.s3proxy import S3Proxy

# --- measurement ------------------------------------------------------------------------------


@dataclass
class Cmd:
    """One measured command."""

    kind: str
    seconds: float
    counts: dict[str, int]
    error: str | None = None

    @property
    def requests(self) -> int:
        return sum(self.counts.values())


@dataclass
class LegResult:
    """One leg of one workload step at one round trip."""

    workload: str
    step: str
    leg: str
    rtt_ms: float
    status: str = "ok"
    wall_s: float = 0.0
    drain_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    commands: list[Cmd] = field(default_factory=list)
    note: str = ""
    skipped: bool = False  # left out by choice (status says why), not a failure

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    @property
    def errors(self) -> int:
        return sum(c.error is not None for c in self.commands)

    def latency_ms(self, kind: str | None = None) -> tuple[float, float]:
        """(median, p95) in ms of the commands of ``kind`` (all if None)."""
        xs = sorted(c.seconds * 1000 for c in self.commands if kind in (None, c.kind))
        if not xs:
            return (0.0, 0.0)
        p95 = xs[min(len(xs) - 1, max(0, round(0.95 * len(xs) + 0.5) - 1))]
        return (statistics.median(xs), p95)

    def per_kind(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for kind in dict.fromkeys(c.kind for c in self.commands):
            cmds = [c for c in self.commands if c.kind == kind]
            p50, p95 = self.latency_ms(kind)
            out[kind] = {
                "n": len(cmds), "requests": sum(c.requests for c in cmds),
                "requests_per_command": sum(c.requests for c in cmds) / len(cmds),
                "p50_ms": p50, "p95_ms": p95,
            }
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("commands")
        p50, p95 = self.latency_ms()
        d.update(requests=self.requests, n_commands=len(self.commands), errors=self.errors,
                 p50_ms=p50, p95_ms=p95, per_kind=self.per_kind())
        first = next((c.error for c in self.commands if c.error), None)
        if first:
            d["first_error"] = first
        return d


class Meter:
    """Times commands and charges each the proxy requests that arrived while it ran."""

    def __init__(self, proxy: S3Proxy, result: LegResult) -> None:
        self.proxy = proxy
        self.result = result

    def run(self, kind: str, fn: Callable[[], object]) -> None:
        before = self.proxy.counts()
        t0 = time.perf_counter()
        error = None
        try:
            fn()
        except Exception as e:  # a failed command is a result, not a crash of the benchmark
            error = f"{type(e).__name__}: {e}"[:300]
        dt = time.perf_counter() - t0
        after = self.proxy.counts()
        delta = {op: n - before.get(op, 0) for op, n in after.items() if n - before.get(op, 0)}
        self.result.commands.append(Cmd(kind, dt, delta, error))
        self.result.wall_s += dt


def settle(proxy: S3Proxy, quiet_s: float, max_s: float = 60.0) -> float:
    """Wait until no request has arrived for ``quiet_s`` (write-behind clients upload after
    close); returns the time waited. Bounded by ``max_s``."""
    t0 = time.monotonic()
    last = proxy.total()
    quiet_since = t0
    while time.monotonic() - t0 < max_s:
        time.sleep(0.1)
        n = proxy.total()
        if n != last:
            last, quiet_since = n, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            break
    return time.monotonic() - t0


# --- the agent session ------------------------------------------------------------------------


def _note(i: int) -> str:
    lines = [f"# Note {i}", f"status: draft-{i}"]
    lines += [f"- fact {j} about topic {i}: the quick brown fox jumps over {j} lazy dogs"
              for j in range(20)]
    return "\n".join(lines) + "\n"


def session_commands(n_files: int) -> list[dict[str, Any]]:
    """The fixed session: create N notes in two directories; view, str_replace and insert on
    each; view the tree; rename half into archive/; delete a quarter; view the tree again."""
    paths = [f"/memories/{('notes', 'people')[i % 2]}/f{i:03d}.md" for i in range(n_files)]
    cmds: list[dict[str, Any]] = [
        {"command": "create", "path": p, "file_text": _note(i)} for i, p in enumerate(paths)
    ]
    for i, p in enumerate(paths):
        cmds += [
            {"command": "view", "path": p},
            {"command": "str_replace", "path": p, "old_str": f"status: draft-{i}",
             "new_str": f"status: reviewed-{i}"},
            {"command": "insert", "path": p, "insert_line": 2,
             "insert_text": f"- learned in session: item {i} matters"},
        ]
    cmds.append({"command": "view", "path": "/memories"})
    cmds += [{"command": "rename", "old_path": paths[i],
              "new_path": f"/memories/archive/f{i:03d}.md"} for i in range(0, n_files, 2)]
    cmds += [{"command": "delete", "path": paths[i]} for i in range(1, n_files, 4)]
    cmds.append({"command": "view", "path": "/memories"})
    return cmds


def command_kind(cmd: Mapping[str, Any]) -> str:
    if cmd["command"] == "view":
        return "view_dir" if cmd["path"].rstrip("/") == "/memories" else "view_file"
    return str(cmd["command"])


class Floor:
    """The session done straight with boto3, with the fewest requests and no cache: every
    command starts cold, as a stateless agent tool would. Objects live under ``memories/``."""

    def __init__(self, client: Any, bucket: str, prefix: str = "memories/") -> None:
        self.s3, self.bucket, self.prefix = client, bucket, prefix

    def _key(self, path: str) -> str:
        return self.prefix + path.removeprefix("/memories").lstrip("/")

    def _get(self, key: str) -> str:
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()

    def _put(self, key: str, text: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=text.encode())

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    def run(self, cmd: Mapping[str, Any]) -> str:
        c = cmd["command"]
        if c == "view":
            if cmd["path"].rstrip("/") == "/memories":
                return "\n".join(self.list_keys(self.prefix))  # one LIST per 1,000 keys
            return self._get(self._key(cmd["path"]))
        if c == "create":
            self._put(self._key(cmd["path"]), cmd["file_text"])
        elif c == "str_replace":
            key = self._key(cmd["path"])
            text = self._get(key)
            if text.count(cmd["old_str"]) != 1:
                raise ValueError("old_str not unique")
            self._put(key, text.replace(cmd["old_str"], cmd.get("new_str", "")))
        elif c == "insert":
            key = self._key(cmd["path"])
            lines = self._get(key).split("\n")
            lines.insert(cmd["insert_line"], cmd["insert_text"].rstrip("\n"))
            self._put(key, "\n".join(lines))
        elif c == "rename":  # S3 has no rename: copy, then delete the source
            src, dst = self._key(cmd["old_path"]), self._key(cmd["new_path"])
            self.s3.copy_object(Bucket=self.bucket, Key=dst,
                                CopySource={"Bucket": self.bucket, "Key": src})
            self.s3.delete_object(Bucket=self.bucket, Key=src)
        elif c == "delete":
            self.s3.delete_object(Bucket=self.bucket, Key=self._key(cmd["path"]))
        else:
            raise ValueError(c)
        return "ok"


def sdk_tool(base: Path) -> Callable[[Mapping[str, Any]], object]:
    """The Anthropic SDK's local-filesystem memory tool on ``base`` (it uses base/memories)."""
    from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

    tool = BetaLocalFilesystemMemoryTool(str(base))
    return tool.call


def memfs_handler(base: Path) -> Callable[[Mapping[str, Any]], object]:
    """memfs's ``MemoryHandler`` with base/memories standing for /memories."""
    from memfs.memory import MemoryHandler

    root = base / "memories"
    root.mkdir(exist_ok=True)
    return MemoryHandler(str(root)).run


def run_session(meter: Meter, call: Callable[[Mapping[str, Any]], object],
                commands: Iterable[Mapping[str, Any]]) -> None:
    for cmd in commands:
        meter.run(command_kind(cmd), lambda cmd=cmd: call(cmd))


# --- shell ------------------------------------------------------------------------------------

SHELL_STEPS = ("cp -r", "ls -lR", "grep -r", "rm -r")
NEEDLE = "NEEDLE-7f3a"


def make_tree(root: Path, n_files: int, per_dir: int = 100) -> None:
    """n_files small text files in subdirectories of ``per_dir``; every 10th holds NEEDLE."""
    for i in range(n_files):
        d = root / f"d{i // per_dir:03d}"
        d.mkdir(parents=True, exist_ok=True)
        extra = f"{NEEDLE}\n" if i % 10 == 0 else ""
        (d / f"file{i:05d}.txt").write_text(f"file {i}\n{extra}" + "lorem ipsum dolor\n" * 8)


def _sh(args: list[str], ok: tuple[int, ...] = (0,)) -> None:
    r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=1800)
    if r.returncode not in ok:
        err = r.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"{args[0]} exited {r.returncode}: {err[0] if err else ''}")


def shell_step(step: str, src: Path, mnt: Path) -> Callable[[], None]:
    tree = mnt / "tree"
    return {
        "cp -r": lambda: _sh(["cp", "-r", str(src), str(tree)]),
        "ls -lR": lambda: _sh(["ls", "-lR", str(tree)]),
        "grep -r": lambda: _sh(["grep", "-r", "-l", NEEDLE, str(tree)], ok=(0,)),
        "rm -r": lambda: _sh(["rm", "-r", str(tree)]),
    }[step]


def floor_shell_step(step: str, src: Path, floor: Floor) -> Callable[[], None]:
    """The shell steps done straight with boto3, sequentially, as a simple script would."""
    s3, bucket = floor.s3, floor.bucket

    def cp() -> None:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                s3.put_object(Bucket=bucket, Key=f"tree/{f.relative_to(src)}",
                              Body=f.read_bytes())

    def ls() -> None:
        floor.list_keys("tree/")

    def grep() -> None:
        hits = [k for k in floor.list_keys("tree/")
                if NEEDLE.encode() in s3.get_object(Bucket=bucket, Key=k)["Body"].read()]
        if not hits:
            raise RuntimeError("no match")

    def rm() -> None:
        keys = floor.list_keys("tree/")
        for i in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=bucket, Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})

    return {"cp -r": cp, "ls -lR": ls, "grep -r": grep, "rm -r": rm}[step]


# --- scale ------------------------------------------------------------------------------------

SCALE_STEPS = ("ls -l", "handler view")


def scale_keys(n_files: int) -> list[str]:
    return [f"scale/note{i:05d}.md" for i in range(n_files)]


def scale_step(step: str, mnt: Path) -> Callable[[], None]:
    d = mnt / "scale"
    if step == "ls -l":
        return lambda: _sh(["ls", "-l", str(d)])

    def view() -> None:
        from memfs.memory import MemoryHandler

        MemoryHandler(str(d)).run({"command": "view", "path": "/memories"})

    return view


def floor_scale_step(step: str, floor: Floor) -> Callable[[], None]:
    # Both steps need the names and sizes of every file: one LIST page per 1,000 keys.
    return lambda: floor.list_keys("scale/")


def counts_sum(results: Iterable[LegResult]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for r in results:
        total.update(r.counts)
    return dict(total)
