"""One change told by two producers: the bucket's notification and a mount's announcement.

Where the bucket notifies the topic the mounts also announce on (``sqs:URL?topic=ARN`` on AWS,
or a RabbitMQ exchange RGW publishes to), every change made through a memfs mount reaches the
other mounts twice, some milliseconds apart. Applying the second word again is not free: it
makes the mount forget once more while its fetch after the first word is in flight, so that
answer is not kept and the mount asks S3 again (p99 four times the single-word set-up, in
``bench.events``'s ``sqs+announce`` row).

The second word is recognised without trusting any order: a change of ``path`` with the same
kind and ETag as the last one applied, within ``WINDOW_S``, from a producer that has not yet
told it. A producer telling the same (kind, ETag) again is a new change (the same bytes written
twice) and is applied. So a word is only ever skipped when another producer's word of a change
with the same bytes was applied within the window, and that producer's word of this change, if
it is another change, is still to come and is applied: a skip costs nothing but a late mtime
for at most the window, never other bytes.
"""

from __future__ import annotations

import collections
import time

from memfs.events.change import Change, ChangeKind, Producer

#: How long after a change was applied another producer's word of it is still recognised.
WINDOW_S = 2.0
#: Paths remembered (the oldest forgotten first).
KEPT = 4096


class DoubleHeard:
    """The last applied change per path and which producers have told it. GUARDED BY: the
    trio thread (``RemoteChanges``)."""

    def __init__(self) -> None:
        self._last: collections.OrderedDict[
            str, tuple[ChangeKind, str, float, set[Producer]]] = collections.OrderedDict()

    def second_word(self, path: str, change: Change) -> bool:
        """Whether ``change`` is another producer's word of the change last applied at
        ``path`` (then it is recorded as told, and need not be applied); else it is recorded as
        the path's last applied change."""
        now = time.monotonic()
        last = self._last.get(path)
        if (last is not None and change.etag is not None and last[0] is change.kind
                and last[1] == change.etag and now - last[2] <= WINDOW_S
                and change.producer not in last[3]):
            last[3].add(change.producer)
            return True
        self._last.pop(path, None)
        self._last[path] = (change.kind, change.etag or "", now, {change.producer})
        while len(self._last) > KEPT:
            self._last.popitem(last=False)
        return False
