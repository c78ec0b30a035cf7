"""SOURCE forms and -o options as mount(8) and FUSE users write them (cli.fuse_conventions)."""

from __future__ import annotations

import argparse

import pytest

from memfs.cli.fuse_conventions import SourceError, apply_options, as_mount_argv, parse_source


@pytest.mark.parametrize(("source", "expected"), [
    ("my-bucket", ("my-bucket", None)),
    ("my-bucket:/agents/alice", ("my-bucket", "agents/alice")),
    ("my-bucket:agents", ("my-bucket", "agents")),
    ("s3://my-bucket/agents/alice/", ("my-bucket", "agents/alice/")),
    ("s3://my-bucket", ("my-bucket", None)),
    ("memfs#my-bucket:/p", ("my-bucket", "p")),
])
def test_sources(source: str, expected: tuple[str, str | None]) -> None:
    assert parse_source(source) == expected


@pytest.mark.parametrize("source", ["", ":/p", "s3://", "s3:///p", "a/b", "memfs#"])
def test_bad_sources(source: str) -> None:
    with pytest.raises(SourceError, match="expected BUCKET"):
        parse_source(source)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("-o", dest="o", action="append", default=[])
    p.add_argument("--endpoint-url")
    p.add_argument("--metadata-ttl")
    p.add_argument("--allow-other", action="store_true", default=None)
    p.add_argument("--read-only", action="store_true", default=None)
    p.add_argument("--read-only-paths")
    return p


def test_options_fill_what_the_command_line_left_unset() -> None:
    p = parser()
    args = p.parse_args(["--metadata-ttl", "9", "-o", "rw,allow_other,metadata_ttl=3",
                         "-o", "endpoint-url=http://h:9000,_netdev,nofail,x-systemd.automount,"
                         "noatime,read_only_paths=policies:pinned"])
    apply_options(p, args, args.o)
    assert args.metadata_ttl == "9"  # the flag wins over -o
    assert args.allow_other is True and args.read_only is False
    assert args.endpoint_url == "http://h:9000"
    assert args.read_only_paths == "policies,pinned"
    args = p.parse_args(["-o", "ro"])
    apply_options(p, args, args.o)
    assert args.read_only is True


@pytest.mark.parametrize(("opt", "message"), [
    ("bogus", "unknown option"), ("help", "unknown option"), ("o=x", "unknown option"),
    ("allow_other=1", "takes no value"), ("endpoint_url", "needs a value"),
    ("metadata_ttl=", "needs a value"),
])
def test_bad_options(opt: str, message: str) -> None:
    p = parser()
    args = p.parse_args(["-o", opt])
    with pytest.raises(SourceError, match=message):
        apply_options(p, args, args.o)


def test_a_mount_helper_call_is_memfs_mount() -> None:
    commands = {"mount", "handle"}
    assert as_mount_argv(["b", "/m", "-o", "rw"], commands) == ["mount", "b", "/m", "-o", "rw"]
    assert as_mount_argv(["handle", "--root", "/m"], commands) == ["handle", "--root", "/m"]
    assert as_mount_argv(["--version"], commands) == ["--version"]
    assert as_mount_argv([], commands) == []
    assert as_mount_argv(["frobnicate"], commands) == ["frobnicate"]  # an unknown command
    assert as_mount_argv(["frobnicate", "--x"], commands) == ["frobnicate", "--x"]
