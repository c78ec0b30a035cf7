"""Shared fixtures: a moto S3 server over HTTP on loopback, reset per test, and real kernel mounts.

Every test that needs S3 talks to moto's ``ThreadedMotoServer`` over HTTP, the way the daemon
talks to a real endpoint. The server lives for the whole session (starting it costs ~1 s) and is
reset before each test, so tests never see each other's buckets.

``mount_factory`` starts ``memfs mount --foreground`` as a subprocess and waits until the kernel
shows the mount (``tests.support.mounts``, the harness's one mount manager); teardown detaches
what is left and fails the test if a daemon did not exit or logged a traceback. A mount that cannot
be made fails the test: nothing here skips.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config

from memfs.mountinfo import is_mountpoint as is_mounted  # noqa: F401 (many tests import it here)
from tests.support.mounts import Mounts, memfs_cmd  # noqa: F401 (memfs_cmd: re-exported)
from tests.support.s3server import atomic_conditional_writes, moto_server

BUCKET = "memfs-test"
REGION = "us-east-1"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server on loopback, shared by the session, whose conditional writes
    are atomic as S3's are (moto checks, then stores: two racing PUTs on one ETag could both
    pass under load, a lost update tests would blame on memfs)."""
    with atomic_conditional_writes(), moto_server() as url:
        yield url


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fake credentials for moto; never let a developer's real profile leak into a test.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    for key in list(os.environ):
        if key.startswith("MEMFS_"):
            monkeypatch.delenv(key)


@pytest.fixture
def s3_reset(s3_endpoint: str) -> str:
    requests.post(f"{s3_endpoint}/moto-api/reset", timeout=10).raise_for_status()
    return s3_endpoint


@pytest.fixture
def s3(s3_reset: str):
    """A boto3 S3 client on the fresh moto server, with the test bucket created."""
    client = boto3.client(
        "s3",
        endpoint_url=s3_reset,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )
    client.create_bucket(Bucket=BUCKET)
    return client


class TestMounts(Mounts):
    """`mount_factory(prefix="", *flags, bucket=, mountpoint=, env=)`: a memfs mount on the test
    bucket at debug level (tests read the log)."""

    __test__ = False  # not a test class, whatever its name

    def __call__(self, prefix: str = "", *extra: str, bucket: str = BUCKET,
                 mountpoint: Path | None = None, env: dict[str, str] | None = None) -> Path:
        return self.memfs(*extra, bucket=bucket, prefix=prefix, mountpoint=mountpoint, env=env)


@pytest.fixture
def mount_factory(s3, s3_reset: str, tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``mount_factory(prefix="", *extra_flags) -> Path``: a live memfs mount on the test bucket."""
    mounts = TestMounts(s3_reset, tmp_path)
    yield mounts
    problems = mounts.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def mnt(mount_factory) -> Path:
    """One live memfs mount of the whole test bucket."""
    return mount_factory()


@pytest.fixture
def planted(mount_factory) -> Path:
    """A mount whose `root/` (a handler's root) holds symlinks planted toward `sentinel/` next to
    it, whose content carries the markers of `tests.handler.test_handler_paths.LEAK_MARKERS`."""
    from tests.handler.test_handler_paths import SECRET

    mnt = mount_factory("")
    (mnt / "sentinel").mkdir()
    (mnt / "sentinel" / "secret.txt").write_text(f"{SECRET}\nHIDDEN-LINE-TWO\n")
    (mnt / "sentinel" / "sub").mkdir()
    (mnt / "sentinel" / "sub" / "f").write_text("HIDDEN-SUB-FILE\n")
    root = mnt / "root"
    (root / "d" / "deep").mkdir(parents=True)
    (root / "inner").mkdir()
    (root / "inner" / "f.md").write_text("inner\n")
    os.symlink("../sentinel", root / "out_dir")
    os.symlink("../sentinel/secret.txt", root / "out_file")
    os.symlink(str(mnt / "sentinel"), root / "abs")
    os.symlink("loop", root / "loop")
    return mnt


TIERS = ("unit", "core", "mount", "handler", "ops", "reliability", "system")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier: the directory under tests/ it lives in."""
    here = Path(__file__).parent
    for item in items:
        tier = item.path.relative_to(here).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of the tiers "
                                    f"tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
