"""The one mount manager: memfs daemons (and s3fs-fuse, rclone as peers) for tests and runs.

`Mounts(endpoint, workdir)` starts each mount as a child process in the foreground, its output in
a log file, and waits (bounded) until the kernel shows it; a mount that does not come up raises
`MountError` with the log, and leaves no process behind. `unmount(mnt)` is the clean path —
``fusermount3 -u``, then a memfs daemon must exit 0 — and `close()` detaches whatever is left
(``-u -z``), then reports daemons that would not exit or that logged a traceback. The test suite
(`tests/conftest.py`), the benchmarks (`bench/targets.py`) and the reliability runner use it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memfs.mountinfo import is_mountpoint, wait_for_mount
from tests.support.s3server import KEY_ID, REGION, SECRET, clean_env

#: What each kind of mount needs on PATH.
TOOLS = {"memfs": "fusermount3", "s3fs": "s3fs", "rclone": "rclone"}


class MountError(RuntimeError):
    """A mount could not be made or did not end cleanly."""


@dataclass
class Mount:
    kind: str
    path: Path
    proc: subprocess.Popen
    log: Path


#: This checkout: memfs children import it unless the caller set PYTHONPATH (bench.bigdirs
#: points a leg at another checkout that way).
REPO = Path(__file__).resolve().parents[2]


def memfs_cmd() -> list[str]:
    """The memfs command (of this checkout, see `REPO`)."""
    return [sys.executable, "-m", "memfs"]


class Mounts:
    """Mounts of one bucket server, started and tracked for one test, benchmark leg or run.

    `env` is the base environment of every child (default: this process's, as it is when the
    mount starts — tests set variables after making the manager); `clean=True` passes it through
    `s3server.clean_env()` (test credentials, no AWS_/MEMFS_/RCLONE_ settings of the caller).
    """

    def __init__(self, endpoint: str, workdir: Path, *, env: Mapping[str, str] | None = None,
                 clean: bool = False) -> None:
        self.endpoint = endpoint
        self.workdir = workdir
        self._env = env
        self._clean = clean
        self.mounts: list[Mount] = []

    def base_env(self) -> dict[str, str]:
        base = dict(os.environ if self._env is None else self._env)
        return clean_env(base) if self._clean else base

    @property
    def procs(self) -> list[tuple[subprocess.Popen, Path, Path]]:
        """(process, mountpoint, log) of every mount made, in order."""
        return [(m.proc, m.path, m.log) for m in self.mounts]

    # -- starting --------------------------------------------------------------------------

    def memfs(self, *flags: str, bucket: str, prefix: str = "", mountpoint: Path | None = None,
              endpoint: str | None = None, env: Mapping[str, str] | None = None,
              log_level: str | None = "debug", log: Path | None = None) -> Path:
        """``memfs mount MNT --bucket B --endpoint-url E --foreground [flags]``; the mountpoint."""
        mnt, log = self._place(mountpoint, log)
        args = [*memfs_cmd(), "mount", str(mnt), "--bucket", bucket,
                "--endpoint-url", endpoint or self.endpoint, "--foreground"]
        if log_level:
            args += ["--log-level", log_level]
        if prefix:
            args += ["--prefix", prefix]
        if not any(f == "--cache-dir" or f.startswith("--cache-dir=") for f in flags):
            # Each mountpoint gets its own content cache below it; keeping them in the workdir
            # (not ~/.cache) leaves nothing behind and lets a test restart with its cache.
            args += ["--cache-dir", str(self.workdir / "cache")]
        return self._start("memfs", [*args, *flags], mnt, log, env)

    def peer(self, kind: str, bucket: str, *, endpoint: str | None = None,
             mountpoint: Path | None = None, log: Path | None = None,
             allow_other: bool = False) -> Path:
        """s3fs-fuse or rclone on `bucket`, set up as the benchmarks compare them."""
        if shutil.which(TOOLS[kind]) is None:
            raise MountError(f"{TOOLS[kind]} not installed (scripts/bootstrap installs it)")
        mnt, log = self._place(mountpoint, log)
        url = endpoint or self.endpoint
        extra: dict[str, str] = {}
        if kind == "s3fs":
            pw = mnt.parent / f"{mnt.name}.passwd"
            pw.write_text(f"{KEY_ID}:{SECRET}\n")
            pw.chmod(0o600)
            args = ["s3fs", bucket, str(mnt), "-f", "-o", f"url={url}", "-o",
                    "use_path_request_style", "-o", f"passwd_file={pw}", "-o", f"endpoint={REGION}"]
            if allow_other:
                args += ["-o", "allow_other"]
        elif kind == "rclone":
            extra = dict(
                RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
                RCLONE_CONFIG_BENCH_ENDPOINT=url, RCLONE_CONFIG_BENCH_REGION=REGION,
                RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=KEY_ID,
                RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=SECRET,
            )
            # --vfs-cache-mode writes: files are written to a local cache and uploaded after
            # close, once --vfs-write-back (default 5 s) has passed. 1 s keeps benchmarks short;
            # the upload is counted by waiting for the proxy to go quiet (bench.workloads.settle).
            args = ["rclone", "mount", f"bench:{bucket}", str(mnt), "--config", "/dev/null",
                    "--vfs-cache-mode", "writes", "--vfs-write-back", "1s",
                    "--cache-dir", str(mnt.parent / f"{mnt.name}.cache")]
            if allow_other:
                args.append("--allow-other")
        else:
            raise ValueError(f"unknown mount kind {kind!r}")
        return self._start(kind, args, mnt, log, extra)

    def _place(self, mountpoint: Path | None, log: Path | None) -> tuple[Path, Path]:
        n = len(self.mounts)
        mnt = mountpoint or self.workdir / f"mnt{n}"
        mnt.mkdir(parents=True, exist_ok=True)
        return mnt, log or self.workdir / f"daemon{n}.log"

    def _start(self, kind: str, args: list[str], mnt: Path, log: Path,
               env: Mapping[str, str] | None) -> Path:
        child_env = {**self.base_env(), **(env or {})}
        if kind == "memfs":
            child_env.setdefault("PYTHONPATH", str(REPO))
        with open(log, "wb") as logf:
            proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=child_env)
        self.mounts.append(Mount(kind, mnt, proc, log))
        # s3fs may hand off to a daemonized child and exit 0 while the mount is coming up.
        reason = wait_for_mount(mnt, proc, timeout=30, zero_exit_ok=kind != "memfs")
        if reason is not None:
            self._detach(self.mounts[-1])
            raise MountError(f"{kind} {reason}:\n{log.read_text(errors='replace')[-4000:]}")
        return mnt

    # -- ending ----------------------------------------------------------------------------

    def _find(self, mnt: Path) -> Mount:
        for m in reversed(self.mounts):  # a mountpoint may be mounted again: the latest counts
            if m.path == mnt:
                return m
        raise KeyError(mnt)

    def log(self, mnt: Path) -> str:
        return self._find(mnt).log.read_text(errors="replace")

    def unmount(self, mnt: Path) -> str:
        """Unmount cleanly and return the log; MountError unless the daemon exits 0."""
        m = self._find(mnt)
        if m.proc.poll() is not None:
            raise MountError(f"{mnt} is not a live mount (its daemon exited {m.proc.returncode})")
        rc = self.stop(mnt)
        if rc != 0:
            raise MountError(f"{m.kind} exited {rc}:\n{self.log(mnt)[-4000:]}")
        return self.log(mnt)

    def stop(self, mnt: Path) -> int | None:
        """Unmount (retrying a few seconds while busy, lazily at last) and wait for the
        process: its exit status, or None if it had to be killed."""
        m = self._find(mnt)
        for attempt in range(20):
            if not is_mountpoint(mnt):
                break
            lazy = ["-z"] if attempt == 19 else []
            subprocess.run(["fusermount3", "-u", *lazy, str(mnt)], capture_output=True)
            time.sleep(0.25 if attempt else 0)
        try:
            return m.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()
            return None

    def detach(self, mnt: Path) -> None:
        """Lazy-unmount `mnt` and see its daemon gone, whatever state it is in."""
        self._detach(self._find(mnt))

    def _detach(self, m: Mount) -> str | None:
        """Lazy-unmount and stop `m`; why it needed killing, if it did."""
        if is_mountpoint(m.path):
            subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True)
        if m.proc.poll() is None:  # every kind exits by itself once unmounted
            try:
                m.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
                return f"{m.kind} for {m.path} did not exit after unmount"
        return None

    def tracebacks(self) -> int:
        return sum(m.log.read_text(errors="replace").count("Traceback")
                   for m in self.mounts if m.log.exists())

    def close(self) -> list[str]:
        """Detach every mount left; the problems seen (stuck daemons, tracebacks in memfs logs)."""
        problems = []
        for m in self.mounts:
            stuck = self._detach(m)
            if stuck:
                problems.append(stuck)
            text = m.log.read_text(errors="replace") if m.log.exists() else ""
            if m.kind == "memfs" and "Traceback" in text:
                problems.append(f"daemon for {m.path} logged a traceback:\n{text[-4000:]}")
        return problems
