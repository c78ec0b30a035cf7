"""Changes heard from elsewhere, taken as hints: a part of the mount's core.

A change feed (``memfs.events``: S3's notifications through SQS, memfs mounts' announcements
through AMQP) says "key K was created/removed". Change events never carry truth: S3 does. So an
event here only makes the mount forget — the cached metadata of the path, the listing of the
directory that holds it, the kernel's attributes, pages and dentry (``Kernel.forget_inode``,
``forget_entry``) — and the next access asks S3. Nothing of an event's content (size, ETag as the
new version) is ever installed, and its order is never trusted: a duplicate, a reordering or a
late event costs at most a request; a lost one costs at most a TTL. A change of one file right
in a listed directory makes only its name doubtful there (``_doubt_one``, ``memfs.mount.doubts``:
its next lookup is a HEAD, the other names still answer from the listing).

What is skipped: keys outside the mount's prefix and keys no entry shows (``valid_name``, the
endpoint probe's keys); this mount's own announcements (by sender id); and what the mount
already knows (``_known``: an ETag it holds — its own uploads heard back from S3 — or a removal
of a name it does not hold). An event on a path this mount is writing right now is held back
until the write's answer (``memfs.mount.announce``): S3 may notify before it answers.

Freshness follows the feed's health (``set_state``): while it is HEALTHY what the mount learned
stays fresh for ``--events-ttl`` (events tell it of changes sooner); otherwise — connecting, or
DOWN after a broker error, a reconnect or a vanished queue — for ``--metadata-ttl``, as without a
feed. Every change of health drops what was learned before it (``CoreState.stale_before``: one
number, no walk over the cache): changes may have been missed meanwhile.

A LIST or HEAD that was in flight when an event was applied may answer with what S3 held before
the change. A listing sent before a change under its directory was heard is installed already
expired (``CoreState.heard``, ``ListingCache._install``); a HEAD in flight for the path is waited
for and its answer dropped again (``_after_flight``); any HEAD or GET of the path sent before the
change was heard answers its caller but is not kept (``CoreState.kept``: the path is in
``heard`` too).
"""

from __future__ import annotations

import collections
import logging
import time
from collections import Counter

import trio

from memfs.events.change import Change, ChangeKind, Feed, FeedState, Producer
from memfs.mount.doubleheard import DoubleHeard
from memfs.mount.listings import ListingCache
from memfs.mount.nodes import ROOT_INODE, Kind, Node
from memfs.mount.pathtree import parent_of
from memfs.mount.renamepairs import RenamePairs
from memfs.mount.state import CoreState, Part
from memfs.protocol import WRITE_PROBE
from memfs.s3.endpoint import normal_etag
from memfs.s3.keynames import valid_name

log = logging.getLogger(__name__)

#: How long a directory's "change heard" time is kept (``CoreState.heard``): longer than any
#: request can be in flight (bounded retries and timeouts), and pruned past ``HEARD_KEPT``.
HEARD_KEEP_S = 300.0
HEARD_KEPT = 10_000
#: Events held back per path while this mount writes it (more are duplicates or churn).
PARKED_PER_PATH = 16
#: The most names of one listing in doubt at once (``_doubt_one``); past it the listing expires
#: whole: a readdir re-lists it anyway, and a HEAD per name would cost more than one LIST.
DOUBTFUL_MAX = 32
#: Lags kept for the percentiles ``memfs status`` shows.
LAGS_KEPT = 1000


class RemoteChanges(Part):
    """Applies changes heard from the feed (``apply``) and follows its health (``set_state``).

    GUARDED BY: the trio thread. The daemon hands every change and state over from the feed's
    threads with ``run_sync_soon``; nothing here waits (on S3, the broker or the kernel).
    """

    def __init__(self, state: CoreState, listings: ListingCache) -> None:
        super().__init__(state)
        self.listings = listings
        self.feed: Feed | None = None  # set by the daemon (its stats are shown with ours)
        self.feed_state: FeedState | None = None  # None: no change feed configured
        self.reason = ""
        self.since = 0.0
        self.counts: Counter[str] = Counter()
        self.lags: collections.deque[float] = collections.deque(maxlen=LAGS_KEPT)
        self.max_lag = 0.0
        self._parked: dict[str, list[Change]] = {}
        self.pairs = RenamePairs(state)  # the watchers hear a rename's two halves as one
        self.doubles = DoubleHeard()  # one change told by the bucket and by a mount
        state.announce.on_written = self._written
        state.reports["events"] = self.stats

    # -- the feed's health ---------------------------------------------------------------------

    def set_state(self, new: FeedState, reason: str) -> None:
        """The feed's health changed: choose the TTL, drop what was learned before now."""
        old, self.feed_state, self.reason, self.since = self.feed_state, new, reason, time.time()
        if new is old:
            return
        cfg = self.config
        self.state.ttl = (max(cfg.metadata_ttl, cfg.events_ttl) if new is FeedState.HEALTHY
                          else cfg.metadata_ttl)
        self.state.stale_before = time.time()
        self.counts["state_changes"] += 1
        if new is FeedState.HEALTHY:
            log.info("change events: %s healthy (%s); metadata kept %gs", self._feed_name(),
                     reason, self.state.ttl)
        elif new is FeedState.DOWN:
            log.warning("change events: %s down (%s): polling, metadata kept %gs, until it is "
                        "back", self._feed_name(), reason, self.state.ttl)
        else:
            log.info("change events: %s connecting (%s): polling meanwhile", self._feed_name(),
                     reason)

    def _feed_name(self) -> str:
        return self.feed.description if self.feed is not None else "feed"

    # -- changes -------------------------------------------------------------------------------

    def apply(self, change: Change) -> None:
        """One change heard from the feed: forget what it makes doubtful, tell the kernel and
        the watchers. Never waits."""
        now = time.time()
        self.counts["seen"] += 1
        if change.time > 0:
            lag = max(0.0, now - change.time)
            self.lags.append(lag)
            self.max_lag = max(self.max_lag, lag)
        where = self.path_of(change.key) if change.bucket == self.store.bucket else None
        if where is None:
            self.counts["ignored"] += 1
            return
        if change.sender is not None and change.sender == self.state.announce.sender:
            self.counts["ignored"] += 1  # this mount's own announcement
            return
        path = where[0]
        if path in self.state.announce.writing:
            parked = self._parked.setdefault(path, [])
            if len(parked) < PARKED_PER_PATH:
                parked.append(change)
            return
        self._decide(change, *where)

    def path_of(self, key: str) -> tuple[str, bool] | None:
        """The mount's path for ``key`` and whether it is a directory marker; None for a key
        outside the prefix, the prefix's own marker, or a key no entry shows."""
        prefix = self.config.prefix
        if not key.startswith(prefix):
            return None
        rel = key[len(prefix):]
        is_dir = rel.endswith("/")
        if is_dir:
            rel = rel[:-1]
        names = rel.split("/")
        if not rel or not all(valid_name(n) for n in names):
            return None
        if names[-1].startswith(WRITE_PROBE) or names[-1].endswith("_$folder$"):
            return None
        return rel, is_dir

    def _decide(self, change: Change, path: str, is_dir: bool) -> None:
        if (change.producer is Producer.S3
                and self.state.announce.echo(path, change.kind, change.etag)) or self._known(
                    change, path, is_dir):
            self.counts["ignored"] += 1
            if change.kind is ChangeKind.REMOVED and not is_dir:
                self.pairs.known_removal(path)  # no news, but perhaps a rename's half
            return
        if self.doubles.second_word(path, change):  # (a removal, without ETag, never is)
            self.counts["told_twice"] += 1  # its fetch after the first word stands
        else:
            self._forget(path, is_dir, change.kind)
            self.counts["applied"] += 1
        source = self.path_of(change.source) if change.source is not None else None
        self.pairs.heard(change, path, is_dir, source[0] if source and not source[1] else None)

    def _written(self, path: str) -> None:
        """This mount's last write of ``path`` in flight has its answer: decide on the events
        held back for it once the writer has recorded the new ETag (it does so before it next
        yields: hence ``run_sync_soon``)."""
        if path not in self._parked:
            return

        def release() -> None:
            if path in self.state.announce.writing:
                return  # another write of it began meanwhile: it releases them
            for change in self._parked.pop(path, []):
                where = self.path_of(change.key)
                if where is not None:
                    self._decide(change, *where)

        trio.lowlevel.current_trio_token().run_sync_soon(release)

    def _known(self, change: Change, path: str, is_dir: bool) -> bool:
        """Whether the mount already holds what the change says (nothing to forget)."""
        node = self.inodes.at(path)
        if change.kind is ChangeKind.CREATED:
            if is_dir:
                return False  # a marker's metadata may be new: cheap to read again
            if change.etag is None:
                return False
            etag = normal_etag(change.etag)
            if node is not None:
                return node.kind is not Kind.DIR and node.etag == etag
            parent = self.inodes.at(parent_of(path))
            listed = (parent.listing.files.get(path.rsplit("/", 1)[-1])
                      if parent is not None and parent.listing is not None else None)
            return listed is not None and normal_etag(listed.etag) == etag
        if node is not None:
            return False
        # Removed: known when no listing this mount holds names it, along the path. A directory
        # held but never listed (known from its parent's listing) may be implied by this very
        # key alone: the removal can take it away, so it is not known (the root always stays).
        # So is one listed empty with no marker: it no longer exists, and its parent's listing,
        # which names it, is what this removal makes stale.
        above, name = self._known_above(path)
        listing = above.listing
        if listing is None:
            return above.inode == ROOT_INODE
        return listing.kind_of(name) is None and (
            above.inode == ROOT_INODE or listing.has_marker or not listing.is_empty())

    def _known_above(self, path: str) -> tuple[Node, str]:
        """The nearest directory above ``path`` this mount holds, and the name below it."""
        child = path
        while True:
            up = parent_of(child)
            node = self.inodes.at(up)
            if node is not None and node.kind is Kind.DIR:
                return node, child.rsplit("/", 1)[-1]
            child = up

    def _forget(self, path: str, is_dir: bool, kind: ChangeKind) -> None:
        """Drop what the mount holds about ``path`` and its directory; tell the kernel."""
        now = time.time()
        self._heard(path, now)  # a HEAD or GET of it in flight is not kept (``kept``)
        kernel = self.state.kernel
        node = self.inodes.at(path)
        if node is not None and not self.state.is_local(node):
            node.validated_at = 0.0
            if is_dir:
                node.meta_known = node.inode == ROOT_INODE  # its marker's mode may be new
            if node.nlookup:
                if node.kind is Kind.DIR:
                    kernel.forget_attrs(node.inode)  # its marker's mode and times
                else:
                    kernel.forget_inode(node.inode)  # attributes and pages
            if self.state.flights.busy(node.path) and self.state.nursery is not None:
                self.state.nursery.start_soon(self._after_flight, node.path, node)
        above, name = self._known_above(path)
        if self._doubt_one(above, name, path, is_dir, kind):
            self._heard(above.path, now)  # a LIST in flight is installed expired, as below
            kernel.forget_entry(above.inode, name)
            kernel.forget_attrs(above.inode)
            return
        while True:
            self._expire(above, now)
            kernel.forget_entry(above.inode, name)
            kernel.forget_attrs(above.inode)
            # A removal can take an implied directory (no marker) with it: its parent's
            # listing goes too.
            if (kind is not ChangeKind.REMOVED or above.inode == ROOT_INODE
                    or (above.listing is not None and above.listing.has_marker)):
                break
            above.validated_at = 0.0
            name = above.name()
            parent = self.inodes.at(above.parent_path())
            if parent is None:
                break
            above = parent

    def _doubt_one(self, above: Node, name: str, path: str, is_dir: bool,
                   kind: ChangeKind) -> bool:
        """Make only ``name`` doubtful in its directory's listing, if that is enough: the
        change is of a file right in the directory (not a marker, not a key deeper down, not a
        name the listing shows as a directory), and a removal cannot take the directory with
        it (it has a marker, or is the root). The next lookup of the name asks S3 about it
        alone (a HEAD, ``ListingCache.resolve``); every other name is still answered from the
        listing, so a bench's 200-entry directory is not re-listed per change heard. False:
        the whole listing expires (``_expire``)."""
        listing = above.listing
        if (is_dir or listing is None or above.path != parent_of(path)
                or listing.kind_of(name) is Kind.DIR or len(listing.doubtful) >= DOUBTFUL_MAX):
            return False
        if kind is ChangeKind.REMOVED and not (above.inode == ROOT_INODE or listing.has_marker):
            return False
        listing.doubt(name, self.state.fresh(listing.fetched_at))
        return bool(listing.kept_at)

    def _expire(self, dnode: Node, now: float) -> None:
        """The directory's listing no longer answers, nor one whose LIST is in flight."""
        if dnode.listing is not None:
            dnode.listing.expire()
        self._heard(dnode.path, now)

    def _heard(self, path: str, now: float) -> None:
        """Record that a change of (or under) ``path`` was heard ``now``. Kept in the order
        heard (re-inserted), so that pruning what is past ``HEARD_KEEP_S`` stops at the first
        recent one: files' paths are here too, and a walk of the whole map at every event
        would cost O(paths) each past ``HEARD_KEPT``."""
        heard = self.state.heard
        heard.pop(path, None)
        heard[path] = now
        if len(heard) > HEARD_KEPT:
            while heard[oldest := next(iter(heard))] < now - HEARD_KEEP_S:
                del heard[oldest]  # (stops at ``path`` at the latest)

    async def _after_flight(self, path: str, node: Node) -> None:
        """A HEAD of ``path`` was in flight when its change was heard: once it has answered,
        what it said may predate the change — forget it again."""
        async with self.state.flights.hold(path):
            pass
        if self.inodes.at(path) is node and not self.state.is_local(node):
            node.validated_at = 0.0
            if node.nlookup:
                self.state.kernel.forget_inode(node.inode)

    # -- what `memfs status` shows -------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        lags = sorted(self.lags)

        def ms(q: float) -> float | None:
            return round(lags[min(len(lags) - 1, int(q * len(lags)))] * 1000, 1) if lags else None

        out: dict[str, object] = {
            "state": self.feed_state.value if self.feed_state is not None else "off",
            "feed": self.feed.description if self.feed is not None else None,
            "reason": self.reason,
            "since": self.since,
            "ttl_s": self.state.ttl,
            "seen": self.counts["seen"], "applied": self.counts["applied"],
            "ignored": self.counts["ignored"], "published": self.state.announce.published,
            "state_changes": self.counts["state_changes"],
            "renames": {"paired": self.pairs.counts["renames"],
                        "unpaired": self.pairs.counts["unpaired"]},
            "lag_ms": {"p50": ms(0.5), "p99": ms(0.99),
                       "max": round(self.max_lag * 1000, 1) if lags else None},
        }
        if self.feed is not None:
            try:
                out["broker"] = self.feed.stats()
            except Exception as exc:  # a feed's bug must not take `memfs status` with it
                out["broker"] = {"error": str(exc)}
        return out
