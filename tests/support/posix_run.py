"""POSIX conformance of memfs (and optionally s3fs-fuse), measured with pjdfstest (issue #13).

``scripts/posix`` is the entry point; this file is the logic. It builds pjdfstest from
``$PJDFSTEST_SRC`` (default ``../shared/pjdfstest`` next to the repository, a read-only tree) in a
build directory outside the tracked files, starts moto's S3 server on loopback, and for every
group (chmod, chown, …, link) mounts a fresh bucket with a fresh mount, runs
``prove -r -v TESTS/GROUP`` as root from a fresh directory on the mount, unmounts and counts.

Counting is stricter than prove's: a ``not ok N # TODO`` line is a failure (pjdfstest marks
known-broken behaviour of some filesystems TODO, which prove counts as passed), and a ``.t`` that
is killed by the per-file timeout counts every planned subtest it did not print as a failure.
A ``.t`` that leaves at once with ``1..1`` / ``ok 1`` because the suite itself declares the
operation unsupported on this filesystem type (pjdfstest skips ``link`` on ``FUSE.S3FS``) counts
as skipped, not as one passing subtest.

Output: a per-group table (subtests and pass rate per filesystem, with an "all but link" total,
since s3fs does not run ``link``), a details file listing the failing subtest numbers per ``.t``
with the line pjdfstest printed for each, optional JSON, and the number of ``Traceback`` lines in
memfs's daemon logs. ``run_suite`` is the API the CI test (tests/mount/test_posix_subset.py) uses.

Run as ``python -m tests.support.posix_run`` from the repository's root (``scripts/posix``). The
moto server and the mounts come from the harness (``tests.support.s3server``,
``tests.support.mounts``); the daemon runs as ``python -m memfs mount`` from this checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.support.mounts import Mounts
from tests.support.s3server import KEY_ID, SECRET, moto_server

REPO = Path(__file__).resolve().parents[2]
GROUPS = ["chmod", "chown", "ftruncate", "mkdir", "open", "rename", "rmdir", "truncate", "unlink",
          "utimensat", "symlink", "mkfifo", "mknod", "link"]
TARGETS = ["memfs", "s3fs"]
DEFAULT_TIMEOUT = 300.0  # seconds per .t file
REGION = "us-east-1"
TIMEOUT_EXITS = {124, 128 + 9}  # timeout(1): TERM worked / KILL was needed


def default_src() -> Path:
    return Path(os.environ.get("PJDFSTEST_SRC") or REPO.parent / "shared" / "pjdfstest")


def default_build_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "memfs" / "pjdfstest-build"


# ----------------------------------------------------------------------------------------------
# Building pjdfstest


def _tree_digest(src: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file() and ".git" not in p.parts):
        h.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_pjdfstest(src: Path | None = None, build_dir: Path | None = None) -> Path:
    """Copy ``src`` to ``build_dir`` and build the ``pjdfstest`` binary there; return its tests/.

    The tests find the binary by walking up from their own directory, so tests/ and the binary
    must stay together in the copy. A build whose source digest matches is reused; concurrent
    callers serialise on a lock file.
    """
    src = (src or default_src()).resolve()
    build = (build_dir or default_build_dir()).resolve()
    if not (src / "pjdfstest.c").is_file() or not (src / "tests" / "misc.sh").is_file():
        raise RuntimeError(f"no pjdfstest source at {src} (set PJDFSTEST_SRC)")
    build.parent.mkdir(parents=True, exist_ok=True)
    stamp = build / ".memfs-source-digest"
    with open(build.parent / f"{build.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = _tree_digest(src)
        binary = build / "pjdfstest"
        if binary.is_file() and stamp.is_file() and stamp.read_text() == digest:
            return build / "tests"
        for tool in ("autoreconf", "make", "cc"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is missing: run scripts/bootstrap")
        if build.exists():
            shutil.rmtree(build)
        shutil.copytree(src, build, ignore=shutil.ignore_patterns(".git"), symlinks=True)
        for root, dirs, files in os.walk(build):  # the source is read-only; the copy must not be
            for name in [*dirs, *files]:
                p = Path(root, name)
                if not p.is_symlink():
                    p.chmod(p.stat().st_mode | 0o200)
            Path(root).chmod(Path(root).stat().st_mode | 0o200)
        build_log = build / "build.log"
        with open(build_log, "wb") as out:
            for cmd in (["autoreconf", "-ifs"], ["./configure"], ["make", "pjdfstest"]):
                rc = subprocess.run(cmd, cwd=build, stdout=out, stderr=subprocess.STDOUT).returncode
                if rc != 0:
                    tail = build_log.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"building pjdfstest: {' '.join(cmd)} exited {rc}:\n{tail}")
        stamp.write_text(digest)
        return build / "tests"


# ----------------------------------------------------------------------------------------------
# Results


@dataclass
class FileResult:
    """One .t file: what it planned, which subtests passed and which failed."""

    name: str  # "chmod/00.t"
    planned: int = 0
    passed: int = 0
    failed: list[int] = field(default_factory=list)  # subtest numbers, unrun ones included
    messages: dict[int, str] = field(default_factory=dict)  # number -> pjdfstest's "not ok" line
    exit_status: int | None = None  # from prove's "Dubious, test returned N"
    timed_out: bool = False
    plan_guessed: bool = False  # no plan printed: taken from the .t's own echo "1..N"
    skipped: str | None = None  # the suite itself declined to run it here

    @property
    def subtests(self) -> int:
        return 0 if self.skipped else self.passed + len(self.failed)


@dataclass
class GroupResult:
    target: str
    group: str
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    tracebacks: int = 0  # "Traceback" lines in the daemon's log (memfs)
    daemon_exit: int | None = None
    error: str | None = None  # the group could not run (mount failed, prove hung, …)

    @property
    def subtests(self) -> int:
        return sum(f.subtests for f in self.files)

    @property
    def passed(self) -> int:
        return sum(0 if f.skipped else f.passed for f in self.files)

    @property
    def skipped(self) -> bool:
        return bool(self.files) and all(f.skipped for f in self.files)

    def failing(self) -> list[FileResult]:
        return [f for f in self.files if f.failed and not f.skipped]

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(subtests=self.subtests, passed=self.passed, skipped=self.skipped)
        for f, fd in zip(self.files, d["files"], strict=True):
            fd["subtests"] = f.subtests
            fd["messages"] = {str(k): v for k, v in f.messages.items()}
        return d


_PLAN = re.compile(r"^1\.\.(\d+)")
_RESULT = re.compile(r"^(not )?ok (\d+)\b(.*)$")
_HEADER = re.compile(r"^(\S+\.t) \.\.(?: (.*))?$")
_DUBIOUS = re.compile(r"^Dubious, test returned (\d+)")
_STATIC_PLAN = re.compile(r'echo "1\.\.(\d+)"')
_LONG_NAME = re.compile(r"[^\s']{100,}")  # NAME_MAX / PATH_MAX names, shortened in messages


def _shorten(m: re.Match) -> str:
    parts = m.group().count("/") + 1
    return f"<{len(m.group())}-byte name>" if parts == 1 else \
        f"<{len(m.group())}-byte path of {parts} names>"



def static_plans(t_file: Path) -> list[int]:
    """The plans a .t can print (pjdfstest's are literal ``echo "1..N"`` lines)."""
    try:
        return [int(n) for n in _STATIC_PLAN.findall(t_file.read_text(errors="replace"))]
    except OSError:
        return []


def parse_prove(output: str, tests_dir: Path) -> list[FileResult]:
    """Parse ``prove -v`` output (several .t files, one after another) into FileResults."""
    results: list[FileResult] = []
    cur: FileResult | None = None
    seen: dict[int, bool] = {}
    plan: int | None = None
    skip_all: str | None = None

    def finish() -> None:
        if cur is None:
            return
        t_file = tests_dir / cur.name
        plans = static_plans(t_file)
        total = plan
        if total is None:
            total = max(plans, default=len(seen))
            cur.plan_guessed = True
        cur.planned = total
        if skip_all is not None:
            cur.skipped = skip_all
        elif plan == 1 and seen == {1: True} and plans and 1 not in plans:
            cur.skipped = "the suite quick-exits (feature unsupported on this fs type)"
        cur.passed = sum(1 for ok in seen.values() if ok)
        cur.failed = sorted({n for n, ok in seen.items() if not ok}
                            | {n for n in range(1, total + 1) if n not in seen})
        if cur.exit_status in TIMEOUT_EXITS:
            cur.timed_out = True
        results.append(cur)

    for line in output.splitlines():
        if line.startswith("Test Summary Report"):
            break
        m = _HEADER.match(line)
        if m:
            finish()
            path = Path(m.group(1))
            try:
                name = str(path.relative_to(tests_dir))
            except ValueError:
                name = f"{path.parent.name}/{path.name}"
            cur, seen, plan, skip_all = FileResult(name), {}, None, None
            line = m.group(2) or ""
        if cur is None:
            continue
        m = _PLAN.match(line)
        if m and plan is None:
            plan = int(m.group(1))
            if plan == 0:
                skip_all = line.partition("#")[2].strip() or "plan 1..0"
            continue
        m = _RESULT.match(line)
        if m:
            n = int(m.group(2))
            ok = m.group(1) is None  # "not ok N # TODO …" is a failure; "ok N # TODO" a pass
            seen[n] = seen.get(n, True) and ok
            if not ok:
                cur.messages[n] = _LONG_NAME.sub(_shorten, line)
            continue
        m = _DUBIOUS.match(line)
        if m:
            cur.exit_status = int(m.group(1))
    finish()
    return results


# ----------------------------------------------------------------------------------------------
# S3 (moto) and the mounts


def create_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                 aws_access_key_id=KEY_ID,
                 aws_secret_access_key=SECRET).create_bucket(Bucket=bucket)


def mount(mounts: Mounts, target: str, bucket: str, path: Path, log_path: Path) -> Path:
    """Mount ``bucket`` on ``path`` with memfs or s3fs (foreground, allow_other); wait for it.
    The suite switches uid/gid, so other users must reach the mount (and its mountpoint)."""
    path.mkdir(parents=True)
    path.chmod(0o755)
    if target == "memfs":
        return mounts.memfs("--allow-other", bucket=bucket, mountpoint=path, log=log_path,
                            log_level=None)
    if target == "s3fs":
        return mounts.peer("s3fs", bucket, mountpoint=path, log=log_path, allow_other=True)
    raise ValueError(f"unknown target {target!r}")


def group_files(tests_dir: Path, group: str) -> list[Path]:
    return sorted((tests_dir / group).rglob("*.t"))


def run_group(target: str, group: str, tests_dir: Path, mounts: Mounts, work: Path,
              mnt_root: Path, timeout: float = DEFAULT_TIMEOUT) -> GroupResult:
    """A fresh bucket and mount; ``prove -r -v`` over the group from a fresh directory on it.

    Logs go to ``work``; the mountpoint is a new directory under ``mnt_root``.
    """
    result = GroupResult(target, group)
    bucket = f"posix-{target}-{group}-{int(time.time() * 1000) % 10**9}"
    start = time.monotonic()
    files = group_files(tests_dir, group)
    if not files:
        result.error = f"no .t files under {tests_dir / group}"
        return result
    create_bucket(mounts.endpoint, bucket)
    daemon_log = work / f"{target}-{group}.daemon.log"
    try:
        parent = Path(tempfile.mkdtemp(dir=mnt_root))
        parent.chmod(0o755)
        mnt = mount(mounts, target, bucket, parent / group, daemon_log)
    except RuntimeError as exc:
        result.error = str(exc)
        result.files = [_unrun(tests_dir, f) for f in files]
        return result
    prove_out = work / f"{target}-{group}.prove.txt"
    prove_err = work / f"{target}-{group}.stderr.txt"
    try:
        cwd = mnt / f"pjdfstest-{group}"
        cwd.mkdir(mode=0o755)
        cmd = ["prove", "-r", "-v", "--exec", f"timeout -k 10 {timeout:g} /bin/sh",
               str(tests_dir / group)]
        with open(prove_out, "wb") as out, open(prove_err, "wb") as err:
            try:
                subprocess.run(cmd, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                               timeout=len(files) * (timeout + 20) + 60)
            except subprocess.TimeoutExpired:
                result.error = "prove itself did not finish"
        result.files = parse_prove(prove_out.read_text(errors="replace"), tests_dir)
        ran = {f.name for f in result.files}
        result.files += [_unrun(tests_dir, f) for f in files
                         if str(f.relative_to(tests_dir)) not in ran]
    except OSError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.daemon_exit = mounts.stop(mnt)
        result.seconds = time.monotonic() - start
        if target == "memfs":
            result.tracebacks = daemon_log.read_text(errors="replace").count("Traceback")
    return result


def _unrun(tests_dir: Path, t_file: Path) -> FileResult:
    planned = max(static_plans(t_file), default=0)
    return FileResult(str(t_file.relative_to(tests_dir)), planned=planned,
                      failed=list(range(1, planned + 1)), plan_guessed=True)


def run_suite(groups: list[str], targets: list[str], work: Path, *,
              timeout: float = DEFAULT_TIMEOUT, src: Path | None = None,
              build_dir: Path | None = None, progress=None,
              endpoint: str | None = None) -> list[GroupResult]:
    """Build pjdfstest, start moto (or use the S3 ``endpoint`` given), and run every group on
    every target (fresh mount and bucket each)."""
    if os.geteuid() != 0:
        raise RuntimeError("pjdfstest must run as root (it switches uid/gid)")
    tests_dir = build_pjdfstest(src, build_dir)
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    results = []
    server = contextlib.nullcontext(endpoint) if endpoint else moto_server()
    with tempfile.TemporaryDirectory(prefix="memfs-posix-mnt-") as mnt_root, server as url:
        Path(mnt_root).chmod(0o755)  # the suite runs parts of itself as other users
        mounts = Mounts(url, work, clean=True)
        for group in groups:
            for target in targets:
                r = run_group(target, group, tests_dir, mounts, work, Path(mnt_root),
                              timeout)
                results.append(r)
                if progress:
                    progress(r)
    return results


# ----------------------------------------------------------------------------------------------
# Reporting


def _cell(results: list[GroupResult]) -> str:
    if any(r.error for r in results) and not any(r.files for r in results):
        return "error"
    if results and all(r.skipped for r in results):
        return "skipped"
    subtests = sum(r.subtests for r in results)
    passed = sum(r.passed for r in results)
    if not subtests:
        return "-"
    return f"{passed}/{subtests} {100 * passed / subtests:5.1f}%"


def table(results: list[GroupResult], targets: list[str]) -> str:
    groups = list(dict.fromkeys(r.group for r in results))
    by = {(r.target, r.group): r for r in results}
    rows = [["group", "subtests", *(f"{t} passed" for t in targets)]]

    def row(name: str, gs: list[str]) -> list[str]:
        sub = max((sum(by[t, g].subtests for g in gs if (t, g) in by) for t in targets),
                  default=0)
        return [name, str(sub),
                *(_cell([by[t, g] for g in gs if (t, g) in by]) for t in targets)]

    rows += [row(g, [g]) for g in groups]
    if len(groups) > 1:
        rows.append(row("all but link", [g for g in groups if g != "link"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:],
                                                                      strict=True)]
        lines.append(" | ".join(cells))
        if i == 0 or (i == len(groups) and len(groups) > 1):
            lines.append("-+-".join("-" * w for w in widths))
    lines += footer(results, targets)
    return "\n".join(lines)


def footer(results: list[GroupResult], targets: list[str]) -> list[str]:
    out = []
    for t in targets:
        mine = [r for r in results if r.target == t]
        timed = [f.name for r in mine for f in r.files if f.timed_out]
        skipped = [r.group for r in mine if r.skipped]
        errors = [f"{r.group}: {r.error.splitlines()[0]}" for r in mine if r.error]
        unclean = [f"{r.group} ({r.daemon_exit})" for r in mine
                   if r.daemon_exit not in (0,) and not r.error]
        secs = sum(r.seconds for r in mine)
        parts = [f"{secs:.0f} s"]
        if t == "memfs":
            tb = sum(r.tracebacks for r in mine)
            where = ", ".join(r.group for r in mine if r.tracebacks)
            parts.append(f"{tb} Traceback(s) in daemon logs" + (f" ({where})" if where else ""))
        parts.append(f"timed out: {', '.join(timed)}" if timed else "no .t timed out")
        if skipped:
            parts.append(f"skipped by the suite: {', '.join(skipped)}")
        if unclean:
            parts.append(f"daemon exit status not 0 after unmount: {', '.join(unclean)}")
        if errors:
            parts.append(f"errors: {'; '.join(errors)}")
        out.append(f"{t}: " + "; ".join(parts))
    return out


def details(results: list[GroupResult]) -> str:
    """Failing subtests per .t file, with the line pjdfstest printed for each."""
    out = []
    for r in results:
        for f in r.failing():
            notes = []
            if f.timed_out:
                notes.append(f"timed out (exit {f.exit_status})")
            elif f.exit_status is not None:
                notes.append(f"exit {f.exit_status}")
            if f.plan_guessed:
                notes.append("plan taken from the .t")
            note = f" [{'; '.join(notes)}]" if notes else ""
            out.append(f"{r.target} {f.name}: {len(f.failed)}/{f.subtests} failed: "
                       f"{_ranges(f.failed)}{note}")
            for n in f.failed:
                out.append(f"    {f.messages.get(n, f'not run: {n}')}")
    return "\n".join(out) + ("\n" if out else "")


def _ranges(nums: list[int]) -> str:
    spans: list[list[int]] = []
    for n in nums:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/posix",
        description="Run pjdfstest against memfs (and a peer) on moto's S3; print pass rates.")
    p.add_argument("--groups", default=",".join(GROUPS),
                   help="comma-separated groups (default: all %(default)s)")
    p.add_argument("--peer", choices=["s3fs"], help="also run against s3fs-fuse")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    p.add_argument("--details", type=Path, metavar="FILE",
                   default=REPO / "results" / "posix-details.txt",
                   help="failing subtests per .t file (default: %(default)s)")
    p.add_argument("--keep-logs", type=Path, metavar="DIR",
                   help="keep daemon logs and prove output here (default: discarded)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help="seconds per .t file (default: %(default)g)")
    args = p.parse_args(argv)
    groups = [g for g in args.groups.split(",") if g]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        p.error(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    targets = ["memfs", *([args.peer] if args.peer else [])]

    def progress(r: GroupResult) -> None:
        extra = f"  ERROR: {r.error.splitlines()[0]}" if r.error else ""
        print(f"posix: {r.target:6} {r.group:10} {_cell([r]):>18}  {r.seconds:5.0f} s{extra}",
              file=sys.stderr, flush=True)

    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.keep_logs:
            work = args.keep_logs.resolve()
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memfs-posix-")))
        try:
            results = run_suite(groups, targets, work, timeout=args.timeout,
                                progress=progress)
        except RuntimeError as exc:
            print(f"posix: {exc}", file=sys.stderr)
            return 1
    elapsed = time.monotonic() - started
    print(table(results, targets))
    print(f"total time {elapsed:.0f} s")
    args.details.parent.mkdir(parents=True, exist_ok=True)
    args.details.write_text(details(results))
    print(f"failing subtests per .t file: {args.details}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"targets": targets, "groups": groups, "timeout": args.timeout,
             "seconds": round(elapsed, 1), "results": [r.to_json() for r in results]},
            indent=1) + "\n")
    if args.keep_logs:
        print(f"logs: {work}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
