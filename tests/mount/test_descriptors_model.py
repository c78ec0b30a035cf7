"""Several descriptors of a file on one mount behave as on a local disk (a fast subset).

The model is ``tests.support.descriptor_model``: opens with and without ``O_CREAT``, ``O_TRUNC``
and ``O_APPEND``, writes, seeks (``SEEK_END`` included), reads, ``ftruncate``, ``futimens``,
``fstat``, ``fsync`` and ``close`` through several descriptors at once, against the same on a
local directory; then the bytes in S3 and no conflict copy. ``scripts/reliability descriptors``
runs it long and under load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BUCKET
from tests.support.agents import s3_objects
from tests.support.descriptor_model import run_model

TTL = 0.3


@pytest.mark.timeout(900)  # a failure's shrinking runs many examples through the mount
def test_descriptors_on_one_mount_see_one_file(mount_factory, s3, tmp_path: Path) -> None:
    mnt = mount_factory("", "--metadata-ttl", str(TTL))
    local = tmp_path / "local"
    local.mkdir()
    run_model(mnt, local, lambda prefix: s3_objects(s3, BUCKET, prefix), ttl=TTL,
              max_examples=15, steps=25)
