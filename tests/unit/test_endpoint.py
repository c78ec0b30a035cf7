"""ETags in one normal form, and what the endpoint's capabilities make memfs send."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from memfs.s3.endpoint import COPY_IF_MATCH, LEGACY_COPY_IF_MATCH, Capabilities, normal_etag

HEX = st.text(alphabet="0123456789abcdef", min_size=1, max_size=40)
TAG = st.builds(lambda h, parts: h + (f"-{parts}" if parts else ""), HEX,
                st.integers(min_value=0, max_value=10_000))


@given(TAG, st.sampled_from(['{}', '"{}"', ' "{}" ', 'W/"{}"', '{} ']))
def test_every_spelling_of_one_etag_is_one_normal_form(tag: str, spelling: str) -> None:
    normal = normal_etag(spelling.format(tag))
    assert normal == f'"{tag}"'
    assert normal_etag(normal) == normal  # idempotent


@given(st.text(alphabet=string.whitespace + '"', max_size=4))
def test_an_empty_etag_stays_empty(blank: str) -> None:
    assert normal_etag(blank) == ""
    assert normal_etag(None) == ""


@given(TAG, st.sampled_from(["quoted", "unquoted"]))
def test_a_condition_is_spelt_as_the_endpoint_reads_it(tag: str, spelling: str) -> None:
    caps = Capabilities(if_match=spelling)
    for given_etag in (tag, f'"{tag}"'):
        sent = caps.condition_etag(given_etag)
        assert sent == (tag if spelling == "unquoted" else f'"{tag}"')


def test_aws_needs_no_note_and_ceph_gets_one_per_difference() -> None:
    assert Capabilities().summary() == []
    assert Capabilities().conditional_multipart
    ceph = Capabilities(if_match="unquoted", copy_condition=LEGACY_COPY_IF_MATCH,
                        complete_if_match=False, complete_if_none_match=False,
                        complete_returns_etag=False, delete_if_match=False, probed=True)
    assert not ceph.conditional_multipart
    notes = ceph.summary()
    assert len(notes) == 4
    assert any("unquoted" in n for n in notes) and any(LEGACY_COPY_IF_MATCH in n for n in notes)
    assert any("one conditional PUT" in n for n in notes)


def test_where_put_keeps_no_condition_multipart_is_not_given_up() -> None:
    """A server that ignores If-Match (s3rver) gains nothing from single PUTs: big files keep
    going in parts, and the notes say why nothing is safe rather than what is done instead."""
    ignoring = Capabilities(if_match="ignored", if_none_match=False, copy_condition=None,
                            complete_if_match=False, complete_if_none_match=False)
    assert ignoring.conditional_multipart
    notes = ignoring.summary()
    assert not any("one conditional PUT" in n for n in notes)
    assert any("If-Match ignored" in n for n in notes)
    assert Capabilities(copy_condition=COPY_IF_MATCH).summary() == []
