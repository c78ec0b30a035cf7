"""The contract between a memfs mount and everything that talks to it, defined once.

A mount, the memory handler (in an agent's process), the operator tools and s3fs-fuse reading the
same bucket all rely on these names. Change one here and every side changes together; nowhere
else in memfs spells them out.

* How a client recognises a memfs mount: its fstype in /proc/self/mountinfo.
* The extended attributes a mount serves or accepts.
* The object metadata it writes: s3fs-fuse's attribute keys (``x-amz-meta-mode`` as a decimal
  st_mode, ``uid``, ``gid``, ``mtime`` in seconds), so a bucket is shared with s3fs-fuse, plus who
  wrote each version.
* Where the loser of a write race keeps its bytes.
* What an agent id may be (the mount records it with every upload).
"""

from __future__ import annotations

#: The program name, and the FUSE subtype: a mount shows as ``fuse.memfs`` in mountinfo.
NAME = "memfs"
FSTYPE = f"fuse.{NAME}"

# -- extended attributes -------------------------------------------------------------------------
#: On the root: the bucket, prefix, endpoint, region and instance the mount serves (JSON).
XATTR_SOURCE = "user.memfs.source"
#: On the root: usage against the quotas (JSON).
XATTR_USAGE = "user.memfs.usage"
#: On the root: what the mount is doing — pid, uptime, open files, pending uploads, S3 requests
#: by operation and outcome, retries, conflicts, content-cache hits (JSON; `memfs status`).
XATTR_STATS = "user.memfs.stats"
#: On an open file: the agent id recorded with its next upload.
XATTR_AGENT = "user.memfs.agent"
#: On an open file: make this descriptor a private transaction that uploads only at fsync().
#: The value is ``1``, or ``reapply N`` from a writer that re-applies its edit to the newest
#: version itself when it loses a race (the memory handler's str_replace/insert): its lost
#: race keeps no conflict copy, and its N-th attempt that lands counts as a re-applied edit.
XATTR_ATOMIC = "user.memfs.atomic"
#: On a directory: a re-applying writer gave up (its edit no longer meant the same on the newest
#: version), counted for `memfs status`. The value is ignored.
XATTR_EDIT_REFUSED = "user.memfs.edit-refused"
#: On a directory: present (value ``1``) when its last readdir stopped before the end, after
#: too many stored keys no entry can show (docs/SEMANTICS.md, "The trade-off chosen"): the
#: memory tool's view says the listing is incomplete. Absent (ENODATA) otherwise.
XATTR_LISTING_CUT = "user.memfs.listing-cut"
#: On a directory: how many objects S3 holds under it — its whole tree, its own marker and keys
#: no entry shows included — counted up to ``TREE_OBJECTS_COUNTED`` + 1 (that value: more), in
#: decimal. Read once, it costs a LIST per 1,000 objects counted; the memory tool's delete asks
#: it before removing anything (an entry count misses what no entry shows).
XATTR_TREE_OBJECTS = "user.memfs.tree-objects"

# -- limits the memory handler's messages quote ---------------------------------------------------
#: The most keys a directory rename copies; past it rename(2) answers EXDEV before any COPY. The
#: kernel holds both parents' locks (and every rename's mutex) until rename(2) returns, so this
#: is sized to a few seconds of COPYs: 100,000 planted keys held every new lookup in the parent
#: for 10 minutes (fourth hostile review), 10,000 for 54 s and 5,000 for ~25 s on moto (fifth
#: and sixth). `mv` then copies and deletes file by file, holding no lock for long.
RENAME_DIR_KEYS = 1_000
#: The most keys no entry shows (s3fs `name_$folder$` markers, names over 255 bytes) an rmdir
#: deletes with the directory; past it rmdir answers ENOTEMPTY having deleted nothing — they
#: are read and deleted (a LIST and a DeleteObjects per 1,000) while the kernel holds the
#: parent's lock: 30,000 held it 26 s on moto (fifth hostile review, F11).
RMDIR_UNSHOWN_KEYS = 5_000
#: How far the daemon counts a directory's objects (``XATTR_TREE_OBJECTS``), and so the most a
#: memory tool's delete removes: 27 subdirectories that listed empty took 30,024 planted keys
#: with them in 131 s, though the delete's bound of entries had counted 27 (seventh hostile
#: review, F23).
TREE_OBJECTS_COUNTED = 2_000

# -- object metadata (x-amz-meta-<key>) ----------------------------------------------------------
META_MODE = "mode"  # decimal st_mode, file type bits included (s3fs-fuse)
META_UID = "uid"
META_GID = "gid"
META_MTIME = "mtime"  # seconds since the epoch (s3fs-fuse writes an integer)
META_ATIME = "atime"  # as s3fs-fuse writes them
META_CTIME = "ctime"
META_RDEV = "rdev"  # device number of a character or block device (decimal)
META_WRITER = "memfs-writer"  # "<hostname>/<instance>" of the mount that wrote this version
META_AGENT = "memfs-agent"  # the agent id set with XATTR_AGENT, if any
META_RESTORED_FROM = "memfs-restored-from"  # `memfs restore`: the version it copied

#: The Content-Type of a directory marker object (``prefix/dir/``), as s3fs-fuse writes it.
DIR_CONTENT_TYPE = "application/x-directory"

# -- lost races ----------------------------------------------------------------------------------
#: Top-level folder (under the mount's prefix) where a lost race's bytes are kept.
CONFLICT_DIR = ".memfs-conflicts"
#: Key name (under the prefix, plus random hex) of the write a mount makes at start to learn
#: whether the endpoint enforces conditional writes. It exists only on an endpoint that does not,
#: and only until the DELETE that follows it.
WRITE_PROBE = ".memfs-write-probe-"

# -- agent ids -----------------------------------------------------------------------------------
MAX_AGENT_ID = 200


def valid_agent_id(agent_id: str) -> bool:
    """1 to MAX_AGENT_ID printable ASCII characters: what a mount records as ``memfs-agent``."""
    return 0 < len(agent_id) <= MAX_AGENT_ID and agent_id.isascii() and agent_id.isprintable()
