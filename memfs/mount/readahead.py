"""Reading big files at the wire's pace: a window of concurrent ranged GETs that grows while a
reader stays sequential.

A big object (above the part size) is loaded as an empty version (``Loader._load_ranged``) and
filled range by range as it is read, each ranged GET conditional on that version (``If-Match``,
``memfs.s3.transfer.fetch_range``): bytes of two versions never meet in one blob, and a version
replaced in S3 meanwhile makes the read fail with ESTALE (docs/SEMANTICS.md).

Two mechanisms, both per open state (``OpenFile``):

* **The read that misses** fetches what it needs, widened to ``read_ahead`` bytes (aligned to
  1 MiB), doubling from 1 MiB up to the part size while reads stay sequential, and back to 1 MiB
  on a random read: a random reader costs a 1 MiB GET per miss, never a part.
* **The window**: every read of a version still incomplete keeps ``window`` part-size spans
  (aligned to the part size, as a multipart object's parts are) ahead of the reader in flight
  as background GETs. The window starts at one span on a
  sequential read, doubles each time the reader crosses into the next part, up to
  ``--read-ahead`` (default 10, like boto3's ten threads of 8 MiB parts), and closes on a
  random read (spans already in flight finish; nothing new starts). Each span is fetched
  once: spans in flight are recorded (``OpenFile.inflight``) and a read that needs one waits
  for it, looking every few milliseconds whether its own bytes have landed (a span is filled
  and recorded a MiB at a time).

Bounds: at most ``--read-ahead`` background spans in flight in the whole mount (a second big
reader shares them), never more bytes ahead than a quarter of the content cache (the bytes go to
the on-disk blob, not memory), and each GET holds one 1 MiB buffer at a time: memory is the
requests in flight × ~1 MiB, not the window's bytes. A failed background span is only logged:
the read that needs it fetches it again in the foreground and reports the error.
"""

from __future__ import annotations

import logging

import trio

from memfs.mount.blobs import Blob
from memfs.mount.handles import OpenFile
from memfs.mount.loader import Loader
from memfs.mount.state import CoreState, Part

log = logging.getLogger(__name__)

#: The smallest GET a read that misses makes (and its alignment); the first read of a file and
#: every random read fetch this much.
READ_AHEAD = 1024 * 1024
#: A read this close to where the previous one ended still counts as sequential: the kernel
#: sends a reader's requests concurrently and they may arrive slightly out of order.
SLACK = 1024 * 1024
#: How often a read waiting on a span in flight looks whether its own bytes have landed.
PROGRESS_POLL_S = 0.002


class ReadAhead(Part):
    """Reads of big files: the foreground fetch and the window (see the module docstring); a
    part of the mount's core.

    INVARIANT: ``_ahead_running`` counts the background spans in flight in the whole mount,
    at most ``--read-ahead``.
    GUARDED BY: the trio thread.
    """

    def __init__(self, state: CoreState, loader: Loader) -> None:
        super().__init__(state)
        self.loader = loader
        # Background spans in flight in the whole mount, and the most ever at once.
        self._ahead_running = 0
        self.ahead_peak = 0

    def _sequential(self, of: OpenFile, off: int) -> bool:
        return of.read_end - SLACK <= off <= of.read_end + SLACK

    def _window_limit(self) -> int:
        """How many part-size spans a reader may keep ahead: ``--read-ahead``, and no more
        bytes than a quarter of the content cache (at least one span while it is on)."""
        want = self.config.read_ahead
        if want <= 0:
            return 0
        return max(1, min(want, self.content.max_bytes // 4 // self.config.part_size))

    async def fetch_for_read(self, of: OpenFile, body: Blob, off: int, size: int) -> None:
        """Fetch what a read at [off, off+size) needs into ``body``, widened while reads are
        sequential (module docstring). A span in flight that the read needs is waited for, not
        fetched again; the caller then looks again at what is missing. Never takes
        ``of.lock``: readers of different parts of one file fetch at once."""
        end = min(off + size, body.size)
        busy = [done for (s, e), done in of.inflight.items() if s < end and e > off]
        if busy:
            # A span lands a MiB at a time (``Loader``'s fills record each chunk): look again
            # every few milliseconds rather than only once all of it is in. Waiting for the
            # whole span held a reader at the window's edge for up to a part (8 MiB) it had
            # half of, and no read meant no new spans started meanwhile.
            with trio.move_on_after(PROGRESS_POLL_S):
                await busy[0].wait()
            return
        part = self.config.part_size
        if self._sequential(of, off) and of.read_ahead:
            of.read_ahead = min(of.read_ahead * 2, part)
        else:
            of.read_ahead = READ_AHEAD
        start = off - off % READ_AHEAD
        stop = min(body.size, max(end, start + of.read_ahead))
        # Stay clear of spans in flight on either side: their bytes are coming already.
        for s, e in of.inflight:
            if start < e <= off:
                start = e
            if end <= s < stop:
                stop = s
        await self._fetch_span(of, body, start, stop)

    def read_ahead(self, of: OpenFile, body: Blob, off: int, size: int) -> None:
        """After a read of a version still incomplete: grow, keep or close the window, and
        start the background spans it lacks. Called on every such read (hits included: a
        reader served from the window must keep it full). Starts tasks; never waits."""
        part = self.config.part_size
        if not self._sequential(of, off):
            of.window = 0
            return
        limit = self._window_limit()
        if of.window == 0:
            of.window = min(1, limit)
        elif (off + size) // part > of.read_end // part:  # crossed into the next part
            of.window = min(of.window * 2, limit)
        self._top_up(of, body, off + size)

    def _top_up(self, of: OpenFile, body: Blob, pos: int) -> None:
        """Start background spans from the window's frontier (``of.ahead``) until ``window``
        parts past ``pos`` are fetched or in flight, or the mount's bound is reached."""
        if self.state.nursery is None or body.etag is None or of.window <= 0:
            return
        part = self.config.part_size
        of.ahead = max(of.ahead, pos)
        horizon = min(body.size, (pos // part + of.window) * part)  # the window-th boundary
        while of.ahead < horizon and self._ahead_running < self.config.read_ahead:
            start = of.ahead
            # Spans end on part-size boundaries: the first read's MiB made every span straddle
            # two of a multipart object's parts (two parts per GET on S3, three 4 MiB stripes
            # on Ceph RGW instead of two); S3's guidance is ranges aligned to the parts.
            stop = min(body.size, (start // part + 1) * part)
            of.ahead = stop
            if any(s < stop and e > start for s, e in of.inflight):
                continue  # a foreground read is fetching (part of) it
            if body.missing(start, stop - start):
                self._ahead_running += 1
                self.ahead_peak = max(self.ahead_peak, self._ahead_running)
                # Recorded now, not when the task starts: the next read must see it in flight.
                done = of.inflight[(start, stop)] = trio.Event()
                self.state.nursery.start_soon(self._background_span, of, body, start, stop, done)

    async def _fetch_span(self, of: OpenFile, body: Blob, start: int, stop: int) -> None:
        """Fetch [start, stop) of ``body`` in the foreground, recorded as in flight."""
        done = of.inflight[(start, stop)] = trio.Event()
        try:
            await self.loader.fetch(of, start, stop, body)
        finally:
            del of.inflight[(start, stop)]
            done.set()

    async def _background_span(self, of: OpenFile, body: Blob, start: int, stop: int,
                               done: trio.Event) -> None:
        try:
            await self.loader.fetch(of, start, stop, body)
        except OSError as exc:  # the read that needs it fetches it again, and reports
            log.debug("read-ahead of %s [%d, %d) failed: %s", of.node.path, start, stop, exc)
            of.window = 0  # no more background GETs that would fail alike (ESTALE)
        finally:
            self._ahead_running -= 1
            del of.inflight[(start, stop)]
            done.set()
