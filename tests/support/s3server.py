"""The one moto launcher, and the test suite's choice of S3 server (moto, Ceph RGW or a URL).

In-process (`ThreadedMotoServer`, ~1 s to start) for the test suite and the reliability and
pjdfstest runners; in a child process for benchmarks, so moto's work does not compete for the GIL
with the clients and the counting proxy being measured. Both yield the server's URL and stop it
on exit. Test credentials only: nothing here may reach a real account.

`atomic_conditional_writes()` makes an in-process moto apply conditional writes as S3 does: moto
5.2.5 checks ``If-Match``/``If-None-Match`` of a PutObject (and DeleteObject) and only then, after
some work, stores the object, so two PUTs conditional on the same ETag can both succeed when its
threads interleave (seen under CPU load as lost updates in the two-mount storms).

`suite_server()` is the one place the suite's server is chosen, by ``MEMFS_TEST_S3``:

* ``moto`` (the default): the in-process moto server above, its conditional writes atomic;
* ``ceph``: a Ceph RADOS Gateway from ``scripts/ceph-rgw`` (`tests.support.ceph`);
* ``http://host:port``: any S3 endpoint, with keys ``MEMFS_TEST_S3_KEY`` and
  ``MEMFS_TEST_S3_SECRET`` (default ``testing``). Its bucket ``memfs-test`` is emptied before
  every test; point it at a throwaway endpoint.

`TEST_S3` says which was chosen when this module was imported; tests that need moto itself (its
reset API, its in-process backend, a proxy rewriting signed headers) skip elsewhere, naming it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

REGION = "us-east-1"


@dataclass(frozen=True)
class SuiteS3:
    """The S3 server the test suite runs on: ``kind`` is ``moto``, ``ceph`` or ``url``."""

    kind: str
    url: str = ""  # for kind ``url``: the endpoint; the others are started by `suite_server()`
    key_id: str = "testing"
    secret: str = "testing"

    @property
    def is_moto(self) -> bool:
        return self.kind == "moto"

    def describe(self) -> str:
        return self.url if self.kind == "url" else self.kind


def selected(environ: Mapping[str, str] | None = None) -> SuiteS3:
    """The server ``MEMFS_TEST_S3`` asks for (unset or empty: moto)."""
    env = os.environ if environ is None else environ
    choice = env.get("MEMFS_TEST_S3", "").strip() or "moto"
    if choice in ("moto", "ceph"):
        return SuiteS3(choice)
    if choice.startswith(("http://", "https://")):
        return SuiteS3("url", choice.rstrip("/"), env.get("MEMFS_TEST_S3_KEY", "testing"),
                      env.get("MEMFS_TEST_S3_SECRET", "testing"))
    raise ValueError(f"MEMFS_TEST_S3={choice!r}: use moto, ceph or an http(s):// endpoint URL")


#: The suite's server, fixed at import (tests unset MEMFS_* while they run).
TEST_S3 = selected()
#: The keys every test client, mount and peer uses.
KEY_ID = TEST_S3.key_id
SECRET = TEST_S3.secret


@contextlib.contextmanager
def suite_server(choice: SuiteS3 = TEST_S3) -> Iterator[str]:
    """The URL of the suite's S3 server for as long as the context lasts (see the module)."""
    if choice.kind == "moto":
        with atomic_conditional_writes(), moto_server() as url:
            yield url
    elif choice.kind == "ceph":
        from tests.support.ceph import ceph_rgw

        with ceph_rgw() as url:
            yield url
    else:
        yield choice.url


def _missing_ok(exc: Exception) -> bool:
    return getattr(exc, "response", {}).get("Error", {}).get("Code") in (
        "NoSuchBucket", "NoSuchKey", "NoSuchUpload")


def wipe(client: Any, bucket: str, *, keep_buckets: frozenset[str] = frozenset()) -> None:
    """Make a server other than moto as empty as moto's reset does: every bucket loses its
    objects, versions, delete markers and multipart uploads and is deleted, except those in
    ``keep_buckets`` (buckets that were there before the session), which are left alone, and
    ``bucket`` (the suite's), which is only emptied if it was there before."""
    for entry in client.list_buckets().get("Buckets", []):
        name = entry["Name"]
        if name in keep_buckets and name != bucket:
            continue
        try:
            for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=name):
                for up in page.get("Uploads", []):
                    client.abort_multipart_upload(Bucket=name, Key=up["Key"],
                                                  UploadId=up["UploadId"])
            for page in client.get_paginator("list_object_versions").paginate(Bucket=name):
                doomed = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                          for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
                if doomed:
                    try:
                        client.delete_objects(Bucket=name,
                                              Delete={"Objects": doomed, "Quiet": True})
                    except Exception:
                        # Ceph RGW refuses (400) a DeleteObjects whose XML body names a key with
                        # control characters (planted by the hostile-name tests): one by one,
                        # the key goes percent-encoded in the URL.
                        for one in doomed:
                            client.delete_object(Bucket=name, **one)
            if name not in keep_buckets:
                client.delete_bucket(Bucket=name)
        except Exception as exc:
            if not _missing_ok(exc):
                raise


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without the developer's AWS, memfs and rclone
    settings, with moto's test credentials. AWS_CA_BUNDLE goes too: rclone refuses to start with
    it, s3fs may choke on it, and every endpoint here is plain http://."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(("AWS_", "MEMFS_", "RCLONE_"))}
    env.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION=REGION)
    return env


@contextlib.contextmanager
def atomic_conditional_writes() -> Iterator[None]:
    """While active, an in-process moto server handles object writes (PUT, COPY, DELETE, and
    the POSTs that create and complete multipart uploads) one at a time, so each conditional
    write's check and store are one step. Uploads of parts and reads are not serialized. COPY
    also honours ``x-amz-copy-source-if-match``, and CompleteMultipartUpload ``If-Match``, as
    S3 does (moto ignores both)."""
    import threading

    from moto.s3.responses import S3Response

    lock = threading.RLock()
    names = ("put_object", "copy_object", "delete_object", "_key_response_post")
    originals = {name: getattr(S3Response, name) for name in names}

    def serialized(original):
        def method(self, *args, **kwargs):
            with lock:
                return original(self, *args, **kwargs)
        return method

    def copy_if_match(original):
        """moto ignores ``x-amz-copy-source-if-match``; S3 answers 412 when the source is not
        that version (memfs's renames and chmods rely on it)."""
        def method(self, *args, **kwargs):
            from urllib.parse import unquote, urlparse

            from moto.s3.exceptions import PreconditionFailed

            want = self.headers.get("x-amz-copy-source-if-match")
            if want:
                source = urlparse(self.headers.get("x-amz-copy-source") or "")
                bucket, key = unquote(source.path).lstrip("/").split("/", 1)
                current = self.backend.get_object(bucket, key)
                if current is not None and want.strip('"') != current.etag.strip('"'):
                    raise PreconditionFailed(failed_condition="x-amz-copy-source-If-Match")
            return original(self, *args, **kwargs)
        return method

    def complete_if_match(original):
        """moto ignores ``If-Match`` on CompleteMultipartUpload; S3 answers 412 when the key is
        not that version (404 when there is none), and memfs's big writes rely on it."""
        def method(self, request, body, bucket_name, query, key_name, *args, **kwargs):
            from moto.s3.exceptions import MissingKey, PreconditionFailed

            want = request.headers.get("If-Match")
            if want and "uploadId" in query:
                current = self.backend.get_object(bucket_name, key_name)
                if current is None:
                    raise MissingKey(key=key_name)
                if want.strip('"') != current.etag.strip('"'):
                    raise PreconditionFailed(failed_condition="If-Match")
            return original(self, request, body, bucket_name, query, key_name, *args, **kwargs)
        return method

    wrappers = {"copy_object": copy_if_match, "_key_response_post": complete_if_match}
    for name, original in originals.items():
        wrapped = wrappers[name](original) if name in wrappers else original
        setattr(S3Response, name, serialized(wrapped))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(S3Response, name, original)


@contextlib.contextmanager
def moto_server(*, child_process: bool = False) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1; yields its URL (``http://127.0.0.1:PORT``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if not child_process:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            yield url
        finally:
            server.stop()
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env(),
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
