"""Reliability under S3 faults: an agent session through the fault-injecting proxy loses nothing.

Owns issue 6 point 1 in CI. A seeded agent (``tests.support.agents.SoloAgent``) runs memory
commands on a live mount whose S3 traffic goes through ``S3Proxy`` injecting 500 InternalError,
503 SlowDown, connection resets and stalls. Every command must succeed or return a clear error;
afterwards S3 must hold exactly the acknowledged state (a model of acknowledged writes compared
object by object with boto3): no lost acknowledged write, no partial or empty object. The
500-command variant at 10% is ``scripts/reliability faults``.

The last tests pin single fault cases where the error a writer gets and what S3 holds
disagree (see docs/RELIABILITY.md, "Findings").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from memfs.memory import CommandError, MemoryHandler
from memfs.s3.client import make_client
from tests.conftest import BUCKET
from tests.support.agents import (
    SoloAgent,
    check_solo,
    conflict_objects,
    memory_objects,
    s3_objects,
)
from tests.support.s3proxy import (
    DELETE,
    INTERNAL_ERROR,
    LIST,
    PUT,
    RESET,
    RESET_AFTER,
    SLOW_DOWN,
    STALL,
    FaultRule,
    Faults,
    S3Proxy,
)

KINDS = (INTERNAL_ERROR, SLOW_DOWN, RESET, STALL)


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    # Requested before mount_factory, so it outlives the mounts' teardown.
    with S3Proxy(s3_reset) as p:
        yield p


def _mount(mount_factory, proxy: S3Proxy, *flags: str):
    mount_factory.endpoint = proxy.url
    return mount_factory("", "--metadata-ttl", "0.5", *flags)


def _session(mnt, proxy: S3Proxy, faults: Faults, commands: int, seed: int):
    agent = SoloAgent(MemoryHandler(mnt), "agent0", seed=seed)
    proxy.set_faults(faults)
    started = time.monotonic()
    stats = agent.run(commands)
    elapsed = time.monotonic() - started
    injected = len(proxy.faults_injected())
    proxy.set_faults(None)
    return agent, stats, injected, elapsed


def _assert_clean(agent: SoloAgent, stats, s3) -> dict[str, bytes]:
    assert stats.unexpected == [], "\n".join(stats.unexpected)
    assert stats.violations == [], "\n".join(stats.violations)
    # Every failure is one of the handler's sentences naming EIO, never a traceback or a repr
    # ("missing" answers the re-view of a path whose failed creation did not land).
    assert set(stats.errors) <= {"save:EIO", "os:EIO", "root:EIO", "vanished", "missing"}, \
        stats.samples
    objects = s3_objects(s3, BUCKET)
    problems = check_solo([agent], objects)
    assert problems == [], "\n".join(problems)  # each problem names its command history
    assert all(memory_objects(objects).values()), "an empty object in S3"
    return objects


def test_faults_at_10_percent_are_absorbed_by_bounded_retries(proxy, mount_factory, s3) -> None:
    mnt = _mount(mount_factory, proxy, "--s3-timeout", "5")
    faults = Faults(rate=0.10, seed=11, kinds=KINDS, stall_s=0.5)
    agent, stats, injected, elapsed = _session(mnt, proxy, faults, 150, seed=5)
    assert stats.commands >= 150
    assert injected >= 5  # the session really ran through faults
    objects = _assert_clean(agent, stats, s3)
    assert conflict_objects(objects) == {}  # nobody else wrote: no conflict may be invented
    assert elapsed < 300  # bounded, not hanging


def test_faults_that_outlast_retries_surface_as_clear_errors_and_lose_nothing(
        proxy, mount_factory, s3) -> None:
    mnt = _mount(mount_factory, proxy, "--s3-attempts", "1", "--s3-timeout", "5")
    faults = Faults(rate=0.25, seed=3, kinds=(INTERNAL_ERROR, SLOW_DOWN, RESET), stall_s=0.5)
    agent, stats, injected, _ = _session(mnt, proxy, faults, 150, seed=9)
    assert injected >= 20
    assert sum(stats.errors.values()) > 0  # errors did reach the agent ...
    assert stats.ok > stats.commands // 2  # ... and the session still made progress
    objects = _assert_clean(agent, stats, s3)
    assert conflict_objects(objects) == {}
    # The mount still serves after the storm.
    assert MemoryHandler(mnt).run({"command": "view", "path": "/memories"}).startswith("Here")


def _actual_attempts(s3_attempts: int) -> int:
    """How many attempts botocore makes per request for memfs's ``--s3-attempts N``."""
    client = make_client("http://127.0.0.1:9", "us-east-1", max_attempts=s3_attempts)
    return int(client.meta.config.retries["total_max_attempts"])


def test_s3_attempts_counts_the_first_attempt(proxy, mount_factory) -> None:
    """``--s3-attempts N``: "attempts per S3 request, retries included" (cli help)."""
    mnt = _mount(mount_factory, proxy, "--s3-attempts", "1")
    proxy.set_faults(Faults(rules=(FaultRule(SLOW_DOWN, op=PUT, times=1),)))
    proxy.reset_counts()
    with pytest.raises(OSError), open(mnt / "one-attempt.md", "w") as f:
        f.write("x")
    assert _actual_attempts(1) == 1
    assert proxy.counts().get(PUT) == 1


def test_a_write_reported_as_failed_is_not_uploaded_afterwards(proxy, mount_factory, s3) -> None:
    """A handler error says "The command was not applied": S3 must keep the old bytes."""
    mnt = _mount(mount_factory, proxy, "--s3-attempts", "1")
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "one\n"})
    # Exactly the attempts of one close() fail; a later upload of the same bytes would succeed.
    proxy.set_faults(Faults(rules=(FaultRule(SLOW_DOWN, op=PUT, times=_actual_attempts(1)),)))
    with pytest.raises(CommandError, match=r"\(EIO\)\. The command was not applied"):
        h.run({"command": "create", "path": "/memories/a.md", "file_text": "two\n"})
    mount_factory.unmount(mnt)  # every release has been served
    assert s3.get_object(Bucket=BUCKET, Key="a.md")["Body"].read() == b"one\n"


def test_a_put_that_landed_but_lost_its_response_is_not_a_conflict(
        proxy, mount_factory, s3) -> None:
    """S3 applied the PUT, the connection died before the answer, botocore retried with the
    same If-Match: 412. Nobody else wrote; the writer must not be told it lost a race."""
    mnt = _mount(mount_factory, proxy)
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "one\n"})
    proxy.set_faults(Faults(rules=(FaultRule(RESET_AFTER, op=PUT, times=1),)))
    try:
        h.run({"command": "create", "path": "/memories/a.md", "file_text": "two\n"})
        acknowledged = True
    except CommandError:
        acknowledged = False
    objects = s3_objects(s3, BUCKET)
    # Either the write is acknowledged, or it is absent: S3 holds what the writer was told.
    assert objects["a.md"] == (b"two\n" if acknowledged else b"one\n")
    assert conflict_objects(objects) == {}


def test_a_directory_view_never_hides_files_behind_an_s3_error(proxy, mount_factory, s3) -> None:
    """A LIST that fails must make ``view`` fail, not print a listing without the files."""
    s3.put_object(Bucket=BUCKET, Key="notes/f.md", Body=b"remember me\n")
    mnt = _mount(mount_factory, proxy, "--s3-attempts", "1", "--metadata-ttl", "30")
    assert os.listdir(mnt) == ["notes"]  # the root is listed; notes/ is not yet
    proxy.set_faults(Faults(rules=(FaultRule(INTERNAL_ERROR, op=LIST, times=10),)))
    try:
        out = MemoryHandler(mnt).run({"command": "view", "path": "/memories"})
    except CommandError:
        return  # an error is an honest answer
    assert "notes/f.md" in out, f"a listing without the file, as success: {out!r}"


@pytest.mark.parametrize("replacing", [False, True], ids=["new-name", "replacing"])
def test_a_failed_rename_shows_the_copy_it_could_not_remove(
        proxy, mount_factory, s3, replacing: bool) -> None:
    """COPY landed, the DELETE of the source failed, and so did removing the copy: S3 holds
    both names, and the mount must show both (not call the copy missing, nor serve a replaced
    destination's old bytes) while the rename is reported as failed."""
    mnt = _mount(mount_factory, proxy, "--s3-attempts", "1", "--metadata-ttl", "30")
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "alpha\n"})
    if replacing:
        h.run({"command": "create", "path": "/memories/b.md", "file_text": "old b\n"})
        assert (mnt / "b.md").read_text() == "old b\n"  # cached by this mount
    else:
        assert not (mnt / "b.md").exists()  # this mount's listing says "no such name"
    # Fails the DELETE of a.md and (new-name case) the DELETE that would remove the copy.
    proxy.set_faults(Faults(rules=(FaultRule(INTERNAL_ERROR, op=DELETE, times=2),)))
    with pytest.raises(OSError):
        os.rename(mnt / "a.md", mnt / "b.md")
    proxy.set_faults(None)
    objects = s3_objects(s3, BUCKET)
    assert objects["a.md"] == objects["b.md"] == b"alpha\n"
    assert (mnt / "a.md").read_text() == "alpha\n"
    assert (mnt / "b.md").read_text() == "alpha\n"
    assert sorted(os.listdir(mnt)) == ["a.md", "b.md"]


def test_a_failed_rename_of_a_symlink_shows_its_copy_as_a_symlink(
        proxy, mount_factory, s3) -> None:
    mnt = _mount(mount_factory, proxy, "--s3-attempts", "1", "--metadata-ttl", "30")
    os.symlink("target.md", mnt / "link")
    assert not (mnt / "moved").exists()
    proxy.set_faults(Faults(rules=(FaultRule(INTERNAL_ERROR, op=DELETE, times=2),)))
    with pytest.raises(OSError):
        os.rename(mnt / "link", mnt / "moved")
    proxy.set_faults(None)
    assert os.readlink(mnt / "link") == os.readlink(mnt / "moved") == "target.md"
    assert set(s3_objects(s3, BUCKET)) >= {"link", "moved"}
