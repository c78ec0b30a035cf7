"""What every ``memfs`` subcommand shares: the parser, the output style, and environment twins.

* **Style.** Results go to stdout; `Context.say` and `Context.error` escape control and bidi
  characters (``memfs.printable``), so bucket data never reaches a terminal raw. A mistake in
  the command line is one line on stderr, ``memfs COMMAND: what is wrong`` (or ``memfs: ...``),
  exit 2; an operation that fails is one line ``memfs: why``, exit 1 (``memfs.ops`` raises
  `OpError`, worded for this line); Ctrl-C is exit 130. No tracebacks for expected failures.
* **Environment twins.** An option declared with `option(..., env=True)` also reads
  ``MEMFS_<DEST>`` (``--metadata-ttl`` → ``MEMFS_METADATA_TTL``; ``env="MEMFS_EXPIRE"`` names
  another); its help ends with ``[MEMFS_...]``. The command line wins. This is the only place the
  twins' names are made and read (`twin_name`, `Twins`).
* **Commands.** Each module of this package registers its subcommands with `command()`; a
  command is ``run(args, ctx) -> int``. `run_command` runs one module's subcommand on its own
  (what tests call).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from memfs.extras import MissingExtra
from memfs.ops.errors import S3_ERRORS, OpError, describe_s3_error
from memfs.ops.locate import SETTINGS, Target, resolve
from memfs.printable import escape
from memfs.protocol import NAME as PROG
from memfs.s3.bucket import Bucket

T = TypeVar("T")
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}
ENV_PREFIX = PROG.upper() + "_"


class UsageError(Exception):
    """A mistake in the command line; ``str()`` is the one line shown (exit 2)."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (`UsageError`), never a usage dump."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}")


# -- environment twins -----------------------------------------------------------------------


def twin_name(dest: str) -> str:
    """The environment variable that stands for the option stored in `dest`."""
    return ENV_PREFIX + dest.upper()


def option(container: Any, *names: str, help: str, env: bool | str = False,
           env_note: str = "", **kwargs: Any) -> argparse.Action:
    """``container.add_argument(*names, ...)``; with `env`, the option gets its twin
    (`twin_name` of its dest, or the name given) and its help says so."""
    action = container.add_argument(*names, help=help, **kwargs)
    if env:
        name = env if isinstance(env, str) else twin_name(action.dest)
        action.env_twin = name  # type: ignore[attr-defined]
        action.help = f"{help} [{name}{'; ' + env_note if env_note else ''}]"
    return action


BUCKET_GROUP = ("bucket (when PATH is not inside a memfs mount)",
                "A path inside a mounted memfs directory names its bucket and prefix by itself.")


def add_bucket_options(parser: Any) -> None:
    """``--bucket``, ``--prefix``, ``--endpoint-url``, ``--region``: where the memories live
    (``mount``, and every command that reads a bucket without a mount)."""
    option(parser, "--bucket", env=True, help="S3 bucket")
    option(parser, "--prefix", env=True, help="key prefix inside the bucket, e.g. agents/alice/")
    option(parser, "--endpoint-url", env=True, env_note="boto3 also reads AWS_ENDPOINT_URL_S3",
           help="S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO")
    option(parser, "--region", env=True, env_note="boto3 also reads AWS_REGION", help="S3 region")


class Twins:
    """The environment twins of one (sub)command's options, read from `env` when asked."""

    def __init__(self, parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
        self._actions = {a.dest: a for a in parser._actions if getattr(a, "env_twin", None)}
        self._env = env

    def value(self, dest: str) -> Any:
        """The twin's value (None when unset): a boolean for a flag, a one-item list for a
        repeatable option, else the string."""
        action = self._actions[dest]
        name = action.env_twin  # type: ignore[attr-defined]
        raw = self._env.get(name)
        if raw is None:
            return None
        if isinstance(action, argparse._StoreTrueAction):
            if raw.lower() in TRUE_WORDS:
                return True
            if raw.lower() in FALSE_WORDS:
                return False
            raise UsageError(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")
        if isinstance(action, argparse._AppendAction):
            return [raw]
        return raw

    def pick(self, args: argparse.Namespace, dest: str) -> Any:
        """The option's value from the command line, else from its twin (else None)."""
        given = getattr(args, dest)
        return given if given is not None else self.value(dest)

    def values(self, dests: Sequence[str]) -> dict[str, Any]:
        return {dest: self.value(dest) for dest in dests}


# -- running commands ------------------------------------------------------------------------


@dataclass
class Context:
    """What a command may use besides its arguments: the environment and the output streams."""

    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    stdout: IO[str] = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] = field(default_factory=lambda: sys.stderr)
    twins: Twins | None = None

    def say(self, text: str = "") -> None:
        """Print `text` (lines): control and bidi characters from bucket data are escaped as
        `view` shows them (``memfs.printable``), never sent to the terminal raw."""
        print(escape(text, keep="\n"), file=self.stdout, flush=True)

    def error(self, message: str) -> None:
        """One ``memfs: ...`` line on stderr (a message that names its command keeps it); any
        control character in it, a newline too, is escaped: it stays one line."""
        named = message.startswith((f"{PROG} ", f"{PROG}:"))
        print(escape(message if named else f"{PROG}: {message}"), file=self.stderr, flush=True)

    def fail(self, message: str, code: int = 1) -> int:
        self.error(message)
        return code


Run = Callable[[argparse.Namespace, Context], int]


def command(sub: Any, name: str, run: Run, *, help: str, description: str | None = None
            ) -> Parser:
    """Register the subcommand `name`, carried out by `run`; returns its parser for options."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(_run=run, _parser=parser)
    return parser


def dispatch(parser: Parser, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
             stderr: IO[str] | None = None) -> int:
    """Parse `argv` with `parser` and run the command it names; return the exit status."""
    ctx = Context()
    if env is not None:
        ctx.env = env
    if stderr is not None:
        ctx.stderr = stderr
    try:
        args = parser.parse_args(list(argv))
        ctx.twins = Twins(args._parser, ctx.env)
        return args._run(args, ctx)
    except UsageError as exc:
        return ctx.fail(str(exc), 2)
    except OpError as exc:
        return ctx.fail(str(exc), 2 if exc.usage else 1)
    except MissingExtra as exc:  # an optional dependency: the pip install line
        return ctx.fail(str(exc))
    except S3_ERRORS as exc:
        return ctx.fail(describe_s3_error(exc, "?"))
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130


def locate(args: argparse.Namespace, ctx: Context, path: str | None) -> Target:
    """The bucket prefix (and mount) that `path` and the bucket options name: the options given
    must agree with a mount `path` is on; their twins only fill in what the mount does not say."""
    assert ctx.twins is not None
    return resolve(path, {k: getattr(args, k) for k in SETTINGS}, ctx.twins.values(SETTINGS))


def on_bucket(target: Target, call: Callable[[Bucket], T]) -> T:
    """``call(bucket)`` with the target's bucket (``memfs.s3.bucket.Bucket``); an S3 failure becomes
    the one line that names the target's bucket."""
    try:
        return call(Bucket(target.client(), target.bucket))
    except S3_ERRORS as exc:
        raise OpError(describe_s3_error(exc, target.bucket)) from None


def run_command(register: Callable[[Any], None], argv: Sequence[str], **kwargs: Any) -> int:
    """Run one subcommand that `register` defines (``argv[0]`` names it) as ``memfs`` would."""
    parser = Parser(prog=PROG)
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return dispatch(parser, argv, **kwargs)
