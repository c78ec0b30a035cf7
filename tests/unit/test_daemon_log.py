"""What the daemon's log says about pyfuse3's own notices: an invalidation queued just before an
unmount fails once the kernel has gone, and pyfuse3 logs it with a traceback (a CI run under load
hit it at a test's teardown, which fails on any traceback in a daemon's log)."""

from __future__ import annotations

import logging

import pytest

from memfs.mount import daemon


def _notice() -> None:
    try:
        raise OSError(22, "fuse_lowlevel_notify_delete returned: Invalid argument")
    except OSError:
        logging.getLogger("pyfuse3").exception(
            "Failed to submit invalidate_entry request for parent inode %d, name %s", 1, b"x")


@pytest.mark.parametrize("over", [False, True])
def test_a_failed_invalidation_after_the_session_is_debug_without_a_traceback(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, over: bool) -> None:
    monkeypatch.setattr(daemon._after_session, "session_over", over)
    with caplog.at_level(logging.DEBUG, logger="pyfuse3"):
        _notice()
    (record,) = caplog.records
    assert record.getMessage().startswith("Failed to submit invalidate_entry request")
    if over:  # expected: the kernel has gone
        assert record.levelno == logging.DEBUG and record.exc_info is None
        assert record.getMessage().endswith("(the session had ended)")
    else:  # while serving it is an error worth its traceback
        assert record.levelno == logging.ERROR and record.exc_info is not None
