"""Whether memfs sends DeleteObjects: never to Ceph RGW (it aborts RGW 16.2 on a bucket with a
notification topic), told by its request ids; ``MEMFS_BATCH_DELETE`` overrides."""

from __future__ import annotations

import pytest

from memfs.s3.endpoint import Capabilities
from memfs.s3.multidelete import batch_delete_allowed, is_ceph_rgw

RGW_IDS = ["tx000002105e4360f7c3ec7-006b15a57e-1010-default",  # seen from RGW 16.2 here
           "tx00000a9b8c7d6e5f4a3b2-0065f0e1d2-5e3f-us-east"]
OTHER_IDS = ["4442587FB7D0A2F9",  # AWS
             "17A9F2B6C7D1E0AF",  # MinIO
             "CrfNW2O1V1cNvpoYyQnZ2c5pYeYr7QDDfLEHnzhVoX8hKjGrTFby",  # moto
             "", None, "tx12", "tx000002105e4360f7c3ec7"]


@pytest.mark.parametrize("rid", RGW_IDS)
def test_rgw_request_ids(rid: str) -> None:
    assert is_ceph_rgw(rid)


@pytest.mark.parametrize("rid", OTHER_IDS)
def test_other_request_ids(rid: str | None) -> None:
    assert not is_ceph_rgw(rid)


@pytest.mark.parametrize(("setting", "rgw", "allowed"), [
    (None, False, True), (None, True, False), ("auto", True, False), ("auto", False, True),
    ("off", False, False), ("0", False, False), ("on", True, True), ("1", True, True),
    (" OFF ", False, False), ("nonsense", False, True), ("nonsense", True, False)])
def test_the_setting(setting: str | None, rgw: bool, allowed: bool) -> None:
    env = {} if setting is None else {"MEMFS_BATCH_DELETE": setting}
    assert batch_delete_allowed(rgw, env) is allowed


def test_the_summary_says_so() -> None:
    [line] = Capabilities(batch_delete=False, ceph_rgw=True).summary()
    assert "no DeleteObjects (Ceph RGW" in line
    [line] = Capabilities(batch_delete=False, ceph_rgw=False).summary()
    assert "MEMFS_BATCH_DELETE" in line
