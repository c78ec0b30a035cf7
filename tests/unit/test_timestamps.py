"""memfs.s3.client.parse_timestamp against botocore's own parser (dateutil): the same instant for
every timestamp S3 sends, in both of its formats, and botocore's answer for anything else."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime

import botocore.utils
from hypothesis import given
from hypothesis import strategies as st

from memfs.s3.client import parse_timestamp

INSTANTS = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                        timezones=st.just(UTC))


@given(INSTANTS)
def test_iso_8601_as_in_listings(when: datetime) -> None:
    for text in (when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
                 when.strftime("%Y-%m-%dT%H:%M:%SZ"), when.isoformat()):
        ours, theirs = parse_timestamp(text), botocore.utils.parse_timestamp(text)
        assert ours == theirs and ours.tzinfo is not None
        assert ours.timestamp() == theirs.timestamp()


@given(INSTANTS)
def test_http_dates_as_in_headers(when: datetime) -> None:
    text = email.utils.format_datetime(when.replace(microsecond=0), usegmt=True)
    ours, theirs = parse_timestamp(text), botocore.utils.parse_timestamp(text)
    assert ours == theirs and ours.tzinfo is not None


def test_other_forms_get_botocores_answer() -> None:
    for text in ("1733305590", "1733305590.5", "2026-12-04T09:46:30", "Fri, 04 Dec 2026 09:46:30",
                 "Friday, 04-Dec-26 09:46:30 GMT"):
        assert parse_timestamp(text) == botocore.utils.parse_timestamp(text)
