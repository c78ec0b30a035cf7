"""The demo's steps: S3 (embedded or the operator's bucket), two mounted sessions, the tour.

`Demo` owns the processes and places the demo makes (moto, mounts, a work directory) and takes
them down again; `run` is the story's order; `demo` runs it, checks the recall, and ends with
either the clean-up or, with ``keep``, how to explore and stop what was left running.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.demo.story import (
    USER_ONE,
    USER_TWO,
    describe_call,
    indent,
    session_one_turns,
    session_two_turns,
)

DEMO_BUCKET = "memfs-demo"
MODEL = "claude-demo-stub"
WIDTH = 96


class DemoError(Exception):
    """A demo step failed; ``str()`` says which and why."""


# --- output ----------------------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


def heading(text: str) -> None:
    say()
    say(f"── {text} " + "─" * max(0, WIDTH - len(text) - 4))


# --- S3 and mounts ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Demo:
    keep: bool
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="memfs-demo-")))
    bucket: str = DEMO_BUCKET
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    moto: subprocess.Popen | None = None
    own_prefix: bool = False
    mounted: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    #: The operator's bucket, prefix, endpoint_url and region (a bucket: no embedded S3).
    settings: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def mountpoint(self) -> Path:
        return self.workdir / "memories"

    def memfs(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "memfs", *args]

    def client(self):
        from memfs.s3.client import make_client

        return make_client(self.endpoint, self.region)

    # -- S3 --
    def start_s3(self) -> None:
        bucket = self.settings.get("bucket")
        if bucket:
            self.bucket = bucket
            self.endpoint = self.settings.get("endpoint_url") or None
            self.region = self.settings.get("region") or None
            self.prefix = self.settings.get("prefix") or ""
            if not self.prefix:
                self.prefix = f"memfs-demo/{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}/"
                self.own_prefix = True
            where = self.endpoint or "AWS S3"
            say(f"Using your bucket s3://{self.bucket}/{self.prefix} at {where} (MEMFS_BUCKET).")
            try:
                self.client().head_bucket(Bucket=self.bucket)
            except Exception as exc:
                raise DemoError(f"cannot use bucket {self.bucket!r} at {where}: {exc}") from None
            return
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.region = "us-east-1"
        # moto accepts any credentials; these keep boto3 from looking for real ones.
        for key, value in (("AWS_ACCESS_KEY_ID", "demo"), ("AWS_SECRET_ACCESS_KEY", "demo"),
                           ("AWS_DEFAULT_REGION", self.region)):
            os.environ[key] = value
            self.env[key] = value
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            os.environ.pop(key, None)
            self.env.pop(key, None)
        log = open(self.workdir / "moto.log", "wb")  # noqa: SIM115 - outlives this function
        self.moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if self.moto.poll() is not None or time.monotonic() > deadline:
                    raise DemoError("the embedded S3 server (moto) did not start: "
                                    + (self.workdir / "moto.log").read_text()[-500:]) from None
                time.sleep(0.05)
        self.client().create_bucket(Bucket=self.bucket)
        say(f"Started an embedded S3 server (moto, pid {self.moto.pid}) on {self.endpoint} "
            f"with bucket {self.bucket!r}.")
        say("(Set MEMFS_BUCKET and AWS credentials to run the demo against real S3 instead.)")

    def s3_keys(self) -> list[tuple[str, int]]:
        out = []
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix)
        for page in pages:
            out += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
        return out

    def show_s3(self) -> None:
        keys = self.s3_keys()
        say(f"$ aws s3 ls --recursive s3://{self.bucket}/{self.prefix}"
            + (f"   # --endpoint-url {self.endpoint}" if self.endpoint else ""))
        for key, size in keys:
            say(f"  {size:>6}  {key}")
        if not keys:
            say("  (no objects)")

    # -- mounts --
    def mount(self) -> None:
        self.mountpoint.mkdir(exist_ok=True)
        args = ["mount", str(self.mountpoint), "--bucket", self.bucket,
                "--cache-dir", str(self.workdir / "cache")]
        if self.prefix:
            args += ["--prefix", self.prefix]
        if self.endpoint:
            args += ["--endpoint-url", self.endpoint]
        if self.region:
            args += ["--region", self.region]
        say(f"$ memfs {' '.join(shlex.quote(a) for a in args)}")
        result = subprocess.run(self.memfs(*args), capture_output=True, text=True, env=self.env,
                                timeout=60)
        if result.stdout.strip():
            say(indent(result.stdout, "  "))
        if result.returncode != 0:
            raise DemoError(f"memfs mount failed ({result.returncode}): "
                            f"{result.stderr.strip() or result.stdout.strip()}")
        self.mounted.append(self.mountpoint)

    def umount(self, quiet: bool = False) -> None:
        if not quiet:
            say(f"$ memfs umount {self.mountpoint}")
        result = subprocess.run(self.memfs("umount", str(self.mountpoint)), capture_output=True,
                                text=True, env=self.env, timeout=60)
        if result.returncode != 0:
            raise DemoError(f"memfs umount failed: {result.stderr.strip()}")
        if self.mountpoint in self.mounted:
            self.mounted.remove(self.mountpoint)

    # -- a session --
    def session(self, title: str, user: str, turns: Sequence[Any]) -> str:
        import anthropic
        from anthropic.lib.tools import ToolError

        from memfs.demo.stub_messages import StubMessagesServer
        from memfs.memory.sdk import MemoryTool

        class ShowingMemoryTool(MemoryTool):
            """The real tool, printing each call and its result as the runner makes them."""

            def call(self, input: object) -> Any:
                command = dict(input) if isinstance(input, dict) else {"command": repr(input)}
                say("  🔧 " + describe_call(command).replace("\n", "\n     "))
                try:
                    result = super().call(input)
                except ToolError as exc:
                    say(indent(f"✗ {exc}", "     "))
                    raise
                say(indent("↳ " + str(result).replace("\n", "\n  "), "     "))
                return result

        heading(title)
        say(f"user: {user}")
        with StubMessagesServer(turns, model=MODEL) as stub:
            client = anthropic.Anthropic(api_key="demo-no-key-needed", base_url=stub.url,
                                         max_retries=0)
            try:
                runner = client.beta.messages.tool_runner(
                    model=MODEL, max_tokens=1024, tools=[ShowingMemoryTool(self.mountpoint)],
                    messages=[{"role": "user", "content": user}])
                final_text = ""
                for message in runner:
                    text = "".join(b.text for b in message.content if b.type == "text")
                    if text:
                        say(f"claude: {text}")
                        final_text = text
            finally:
                client.close()
            if stub.errors:
                raise DemoError(f"the stub Messages API reported: {stub.errors}")
            if stub.turns_left:
                raise DemoError(f"the conversation stopped early ({stub.turns_left} turns left)")
            failed = [r for r in stub.tool_results() if r.get("is_error")]
            if failed:
                raise DemoError(f"memory tool call(s) failed: {failed}")
        return final_text

    # -- show --
    def show_files(self) -> None:
        say(f"$ ls -laR {self.mountpoint}")
        result = subprocess.run(["ls", "-laR", str(self.mountpoint)], capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise DemoError(f"ls failed: {result.stderr.strip()}")
        say(indent(result.stdout, "  "))
        for path in sorted(p for p in self.mountpoint.rglob("*") if p.is_file()):
            say(f"$ cat {path}")
            say(indent(path.read_text(), "  "))

    # -- teardown --
    def cleanup(self) -> list[str]:
        problems = []
        for mnt in list(self.mounted):
            r = subprocess.run(self.memfs("umount", str(mnt)), capture_output=True, text=True,
                               env=self.env)
            if r.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
                problems.append(f"unmount of {mnt}: {r.stderr.strip()}")
        if self.own_prefix:
            try:
                client = self.client()
                for key, _size in self.s3_keys():
                    client.delete_object(Bucket=self.bucket, Key=key)
            except Exception as exc:
                problems.append(f"removing the demo's objects under {self.prefix}: {exc}")
        if self.moto is not None and self.moto.poll() is None:
            self.moto.send_signal(signal.SIGTERM)
            try:
                self.moto.wait(10)
            except subprocess.TimeoutExpired:
                self.moto.kill()
                self.moto.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return problems


def run(demo: Demo, check: Callable[[str], None]) -> None:
    heading("S3")
    demo.start_s3()

    heading("Mount (session one)")
    demo.mount()
    demo.session("Session one: the agent records what it learns", USER_ONE, session_one_turns())
    heading("End of session one")
    demo.umount()
    say("Nothing is mounted now; the memories live only in S3:")
    demo.show_s3()

    heading("A fresh mount (session two)")
    demo.mount()
    answer = demo.session("Session two: a new conversation recalls it", USER_TWO,
                          session_two_turns())
    check(answer)

    heading("The memories, as plain files")
    demo.show_files()
    heading("The same memories, as S3 objects")
    demo.show_s3()


def demo(keep: bool = False, settings: Mapping[str, str | None] | None = None) -> int:
    """Run the demo; return 0 only if every step worked. `settings` (bucket, prefix,
    endpoint_url, region) name the operator's bucket; without a bucket S3 is embedded."""
    settings = dict(settings or {})
    if not settings.get("bucket"):
        os.environ.pop("AWS_CA_BUNDLE", None)  # plain http to loopback; no CA bundle involved
    started = time.monotonic()
    demo = Demo(keep=keep, settings=settings)

    def check(answer: str) -> None:
        for fact in ("black", "helix", "shipping Friday"):
            if fact not in answer:
                raise DemoError(f"session two did not recall {fact!r}; it said: {answer!r}")
        say("✓ session two recalled every fact from session one, through S3.")

    ok = False
    try:
        run(demo, check)
        ok = True
    except DemoError as exc:
        say()
        print(f"memfs demo: FAILED: {exc}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("memfs demo: interrupted", file=sys.stderr)
    finally:
        if ok and keep:
            heading("Left running (--keep)")
            say(f"Mounted: {demo.mountpoint}")
            say(f"  ls -la {demo.mountpoint}/*   cat {demo.mountpoint}/user/preferences.md")
            say(f"  echo '- tea: never' >> {demo.mountpoint}/user/preferences.md")
            if demo.endpoint:
                say(f"  AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo aws --endpoint-url "
                    f"{demo.endpoint} s3 ls --recursive s3://{demo.bucket}/{demo.prefix}")
            say("When done:")
            say(f"  memfs umount {demo.mountpoint}")
            if demo.moto is not None:
                say(f"  kill {demo.moto.pid}   # the embedded S3 server (its data goes with it)")
            say(f"  rm -rf {demo.workdir}")
            say(f"KEEP mountpoint={demo.mountpoint} moto_pid={demo.moto.pid if demo.moto else ''}"
                f" workdir={demo.workdir}")
        else:
            heading("Clean up")
            problems = demo.cleanup()
            for problem in problems:
                print(f"memfs demo: cleanup: {problem}", file=sys.stderr)
            ok = ok and not problems
            if ok:
                say(f"Unmounted and removed {demo.workdir}. "
                    f"Demo finished in {time.monotonic() - started:.1f} s.")
    return 0 if ok else 1

