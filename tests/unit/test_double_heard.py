"""memfs.mount.doubleheard: a change told by the bucket and by a mount is applied once; the same
bytes written twice are applied twice, whatever the order the four words arrive in."""

from __future__ import annotations

import itertools

from memfs.events.change import Change, ChangeKind, Producer
from memfs.mount import doubleheard
from memfs.mount.doubleheard import DoubleHeard

S3, MEMFS = Producer.S3, Producer.MEMFS


def word(producer: Producer, etag: str | None = "e1", kind: ChangeKind = ChangeKind.CREATED
         ) -> Change:
    return Change("b", "p/f", kind, producer, etag=etag)


def test_the_other_producers_word_of_the_same_change_is_recognised_once() -> None:
    d = DoubleHeard()
    assert not d.second_word("f", word(S3))
    assert d.second_word("f", word(MEMFS))
    assert not d.second_word("f", word(MEMFS))  # a third word: a new change of the same bytes


def test_other_etags_kinds_paths_and_removals_are_never_second_words() -> None:
    d = DoubleHeard()
    assert not d.second_word("f", word(S3))
    assert not d.second_word("f", word(MEMFS, etag="e2"))
    assert not d.second_word("g", word(S3, etag="e2"))
    assert not d.second_word("f", word(S3, etag=None, kind=ChangeKind.REMOVED))
    assert not d.second_word("f", word(MEMFS, etag=None, kind=ChangeKind.REMOVED))


def test_past_the_window_a_word_is_news(monkeypatch) -> None:
    d = DoubleHeard()
    now = [100.0]
    monkeypatch.setattr(doubleheard.time, "monotonic", lambda: now[0])
    assert not d.second_word("f", word(S3))
    now[0] += doubleheard.WINDOW_S + 0.1
    assert not d.second_word("f", word(MEMFS))


def test_two_writes_of_the_same_bytes_are_never_left_unapplied_in_any_order() -> None:
    """Each producer tells each of two writes once, in any order (neither engine keeps one).
    Any word of write 2 arrives after write 2 was made, so the mount is fresh when it forgets
    at or after the first such word: some applied word must come no earlier than it."""
    words = [(S3, 1), (MEMFS, 1), (S3, 2), (MEMFS, 2)]
    for order in itertools.permutations(words):
        d = DoubleHeard()
        applied = [i for i, (p, _) in enumerate(order) if not d.second_word("f", word(p))]
        first_of_2 = min(i for i, (_, n) in enumerate(order) if n == 2)
        assert max(applied) >= first_of_2, order
        assert len(applied) >= 2, order  # the second write is never only a skip
