"""Shared fixtures: the S3 server (moto over HTTP on loopback by default), reset per test, and
real kernel mounts.

Every test that needs S3 talks to one server over HTTP, the way the daemon talks to a real
endpoint. ``MEMFS_TEST_S3`` picks it (`tests.support.s3server`): ``moto`` (default), ``ceph`` (a
Ceph RADOS Gateway from ``scripts/ceph-rgw``) or an endpoint URL with ``MEMFS_TEST_S3_KEY`` and
``MEMFS_TEST_S3_SECRET``. The server lives for the whole session and is reset before each test, so
tests never see each other's buckets: moto by its reset API, any other server by deleting what
the previous test left (`s3server.wipe`). A test that needs moto itself is marked
``@needs_moto("<the capability>")`` and skips elsewhere with that reason.

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
from tests.support.s3server import KEY_ID, SECRET, TEST_S3, suite_server, wipe

BUCKET = "memfs-test"
REGION = "us-east-1"


def needs_moto(capability: str) -> pytest.MarkDecorator:
    """Skip a test unless the suite runs on moto, naming what the other server lacks."""
    return pytest.mark.skipif(not TEST_S3.is_moto, reason=(
        f"needs {capability}; the suite runs on MEMFS_TEST_S3={TEST_S3.describe()}"))


def _client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of the session's S3 server (moto unless ``MEMFS_TEST_S3`` says otherwise). moto's
    conditional writes are made atomic as S3's are (moto checks, then stores: two racing PUTs on
    one ETag could both pass under load, a lost update tests would blame on memfs)."""
    with suite_server() as url:
        yield url


@pytest.fixture(scope="session")
def _buckets_before(s3_endpoint: str) -> frozenset[str]:
    """On a server other than moto: the buckets there before the session, which resets keep."""
    if TEST_S3.is_moto:
        return frozenset()
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION,
                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    names = frozenset(b["Name"] for b in client.list_buckets().get("Buckets", []))
    if TEST_S3.kind == "ceph":  # a throwaway cluster (scripts/ceph-rgw): nothing there is kept
        return frozenset()
    return names


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite's credentials (moto's fake ones by default); never a developer's real profile.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    for key in list(os.environ):
        if key.startswith("MEMFS_"):
            monkeypatch.delenv(key)


@pytest.fixture
def s3_reset(s3_endpoint: str, _buckets_before: frozenset[str]) -> str:
    """The session's server, emptied: moto's reset, or `wipe` of what earlier tests left."""
    if TEST_S3.is_moto:
        requests.post(f"{s3_endpoint}/moto-api/reset", timeout=10).raise_for_status()
    else:
        wipe(_client(s3_endpoint), BUCKET, keep_buckets=_buckets_before)
    return s3_endpoint


@pytest.fixture
def s3(s3_reset: str):
    """A boto3 S3 client on the freshly reset server, with the test bucket created."""
    client = _client(s3_reset)
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        if TEST_S3.is_moto:  # moto's reset leaves no bucket
            raise
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


def pytest_report_header() -> str:
    return f"S3 server: {TEST_S3.describe()} (MEMFS_TEST_S3; moto, ceph or an endpoint URL)"
