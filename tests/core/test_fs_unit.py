"""``MemFS`` operations called directly (no kernel), with every S3 request counted.

These pin down the request costs docs/SEMANTICS.md promises: a lookup in a listed directory is
free, a listing is one LIST per 1,000 entries, a rewrite is one conditional PUT, and so on. The
store talks HTTP to moto's server like the daemon does; a botocore hook counts each API call.
"""

from __future__ import annotations

import collections
import errno
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pyfuse3
import pytest
import trio

from memfs.mount.config import MountConfig
from memfs.mount.fs import MemFS
from memfs.mount.state import Kernel
from memfs.protocol import XATTR_ATOMIC
from memfs.s3.client import make_client
from memfs.s3.store import Store
from tests.conftest import BUCKET

ROOT = pyfuse3.ROOT_INODE
CTX = SimpleNamespace(uid=os.getuid(), gid=os.getgid(), pid=os.getpid(), umask=0o022)


class Counted:
    def __init__(self, endpoint: str, prefix: str = "", ttl: float = 60.0) -> None:
        client = make_client(endpoint, "us-east-1")
        self.calls: collections.Counter[str] = collections.Counter()
        client.meta.events.register("before-call.s3", self._count)
        self.store = Store(client, BUCKET, prefix)
        self.fs = MemFS(self.store, MountConfig(Path("/unused"), BUCKET, prefix=prefix,
                                                metadata_ttl=ttl))

    def _count(self, event_name: str, **kwargs) -> None:
        self.calls[event_name.rsplit(".", 1)[-1]] += 1

    def take(self) -> dict[str, int]:
        calls = dict(self.calls)
        self.calls.clear()
        return calls


@pytest.fixture
def counted(s3, s3_reset) -> Counted:
    return Counted(s3_reset)


def run(fn):
    return trio.run(fn)


async def write_file(fs: MemFS, parent: int, name: bytes, data: bytes) -> int:
    fi, attrs = await fs.create(parent, name, 0o644, os.O_WRONLY, CTX)
    await fs.write(fi.fh, 0, data)
    await fs.flush(fi.fh)
    await fs.release(fi.fh)
    return attrs.st_ino


async def read_file(fs: MemFS, inode: int) -> bytes:
    fi = await fs.open(inode, os.O_RDONLY, CTX)
    data = await fs.read(fi.fh, 0, 1 << 20)
    await fs.release(fi.fh)
    return data


def test_create_costs_one_list_and_one_put(counted: Counted, s3) -> None:
    async def main():
        await write_file(counted.fs, ROOT, b"a.md", b"hello")
    run(main)
    # The LIST answers the create's existence check (and every later lookup in the directory).
    assert counted.take() == {"ListObjectsV2": 1, "PutObject": 1}
    assert s3.get_object(Bucket=BUCKET, Key="a.md")["Body"].read() == b"hello"


def test_lookups_in_a_listed_directory_are_free(counted: Counted, s3) -> None:
    for i in range(5):
        s3.put_object(Bucket=BUCKET, Key=f"f{i}.md", Body=b"x")

    async def main():
        fs = counted.fs
        inodes = [(await fs.lookup(ROOT, f"f{i}.md".encode(), CTX)).st_ino for i in range(5)]
        # First sight of each object: one LIST for the directory, and one GET per small file
        # for its stored metadata (mode, owner, symlink or not), which also caches its bytes.
        assert counted.take() == {"ListObjectsV2": 1, "GetObject": 5}
        for i in range(5):
            await fs.lookup(ROOT, f"f{i}.md".encode(), CTX)
        missing = await fs.lookup(ROOT, b"absent.md", CTX)
        # A negative entry, not an error, and one the kernel does not cache: a name this
        # mount learns about outside a successful operation must show at the next lookup.
        assert (missing.st_ino, missing.entry_timeout) == (0, 0)
        assert counted.take() == {}  # answered from the listing
        fh = await fs.opendir(ROOT, CTX)
        assert [n for n, _ in (await fs.core.dir_entries(fh))][2:] == [f"f{i}.md" for i in range(5)]
        await fs.releasedir(fh)
        for ino in inodes:
            assert await read_file(fs, ino) == b"x"  # served from the bytes fetched above
    run(main)
    assert counted.take() == {}


def test_metadata_of_large_files_is_a_head(counted: Counted, s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="big.bin", Body=b"\0" * (300 * 1024),
                  Metadata={"mode": str(stat.S_IFREG | 0o640)})

    async def main():
        attrs = await counted.fs.lookup(ROOT, b"big.bin", CTX)
        assert stat.S_IMODE(attrs.st_mode) == 0o640
    run(main)
    assert counted.take() == {"ListObjectsV2": 1, "HeadObject": 1}


def test_rewrite_with_o_trunc_is_one_conditional_put(counted: Counted, s3) -> None:
    async def main():
        fs = counted.fs
        ino = await write_file(fs, ROOT, b"m.md", b"v1")
        counted.take()
        fi = await fs.open(ino, os.O_WRONLY | os.O_TRUNC, CTX)
        await fs.write(fi.fh, 0, b"v2")
        await fs.flush(fi.fh)
        await fs.release(fi.fh)
    run(main)
    assert counted.take() == {"PutObject": 1}
    assert s3.get_object(Bucket=BUCKET, Key="m.md")["Body"].read() == b"v2"


def test_reopen_within_ttl_serves_cached_bytes(counted: Counted) -> None:
    async def main():
        fs = counted.fs
        ino = await write_file(fs, ROOT, b"r.md", b"cached")
        counted.take()
        assert await read_file(fs, ino) == b"cached"
        assert await read_file(fs, ino) == b"cached"
    run(main)
    assert counted.take() == {}


def test_reopen_after_ttl_in_a_listed_directory_lists_it_again(s3, s3_reset) -> None:
    """A cached version whose TTL ran out is confirmed by one LIST of its directory (which
    confirms its siblings too), not a GET per file."""
    c = Counted(s3_reset, ttl=0.2)

    async def main():
        inos = [await write_file(c.fs, ROOT, f"r{i}.md".encode(), b"data") for i in range(3)]
        await c.fs.core.listings.listing(c.fs.core.inodes.at(""))  # the directory was listed
        c.take()
        await trio.sleep(0.3)
        for ino in inos:
            assert await read_file(c.fs, ino) == b"data"
    run(main)
    assert c.take() == {"ListObjectsV2": 1}


def test_a_directory_listed_within_the_ttl_is_looked_up_without_listing_its_parent(
        s3, s3_reset) -> None:
    """Its own LIST showed keys under it: it exists. Once its parent's listing has expired, a
    lookup of its name still costs nothing; a directory whose own listing has expired too is
    confirmed by listing the parent, as before."""
    s3.put_object(Bucket=BUCKET, Key="d/f.md", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="e/g.md", Body=b"y")
    c = Counted(s3_reset, ttl=1.0)

    async def main():
        d = (await c.fs.lookup(ROOT, b"d", CTX)).st_ino  # lists the root
        e = (await c.fs.lookup(ROOT, b"e", CTX)).st_ino
        await trio.sleep(0.6)
        assert (await c.fs.lookup(d, b"f.md", CTX)).st_ino != 0  # lists d (and reads f.md)
        assert c.take()["ListObjectsV2"] == 2
        await trio.sleep(0.6)  # the root's listing has expired, d's has not
        assert (await c.fs.lookup(ROOT, b"d", CTX)).st_ino == d
        assert c.take() == {}
        assert (await c.fs.lookup(ROOT, b"e", CTX)).st_ino == e  # known only from the root
        assert c.take() == {"ListObjectsV2": 1}
    run(main)


def test_an_expired_directory_in_use_is_confirmed_by_its_own_listing(s3, s3_reset) -> None:
    """Once every listing has expired, looking up a directory that was listed before re-lists
    that directory, not its parent: one LIST proves it exists and answers the lookup of the
    name inside it that usually follows. Keys under it prove its ancestors too."""
    s3.put_object(Bucket=BUCKET, Key="a/b/f.md", Body=b"x")
    c = Counted(s3_reset, ttl=0.5)

    async def main():
        a = (await c.fs.lookup(ROOT, b"a", CTX)).st_ino  # lists the root
        b = (await c.fs.lookup(a, b"b", CTX)).st_ino  # lists a
        f = (await c.fs.lookup(b, b"f.md", CTX)).st_ino  # lists b (and reads f.md)
        assert c.take()["ListObjectsV2"] == 3
        await trio.sleep(0.7)  # every listing has expired
        assert (await c.fs.lookup(a, b"b", CTX)).st_ino == b
        assert c.take() == {"ListObjectsV2": 1}
        assert (await c.fs.lookup(b, b"f.md", CTX)).st_ino == f
        assert (await c.fs.lookup(ROOT, b"a", CTX)).st_ino == a
        assert c.take() == {}
    run(main)


def test_a_directory_emptied_elsewhere_is_looked_up_in_its_parent(s3, s3_reset) -> None:
    """Its own LIST shows nothing under it: the parent's listing decides, as before."""
    s3.put_object(Bucket=BUCKET, Key="a/b/f.md", Body=b"x")
    c = Counted(s3_reset, ttl=0.5)

    async def main():
        a = (await c.fs.lookup(ROOT, b"a", CTX)).st_ino
        b = (await c.fs.lookup(a, b"b", CTX)).st_ino
        await c.fs.lookup(b, b"f.md", CTX)
        s3.delete_object(Bucket=BUCKET, Key="a/b/f.md")
        s3.put_object(Bucket=BUCKET, Key="a/g.md", Body=b"y")
        await trio.sleep(0.7)
        c.take()
        assert (await c.fs.lookup(a, b"b", CTX)).st_ino == 0  # no such name
        assert c.take() == {"ListObjectsV2": 2}  # b's own (empty), then a's
    run(main)


class AttrsForgotten(Kernel):
    """Records which inodes' cached attributes the core told the kernel to drop."""

    def __init__(self) -> None:
        self.inodes: list[int] = []

    def forget_attrs(self, inode: int) -> None:
        self.inodes.append(inode)


def test_an_open_drops_the_kernels_cached_size_only_when_it_may_be_stale(s3, s3_reset) -> None:
    """The kernel bounds cached reads by the size it holds: an open makes it ask again only
    when that size may differ from ours (what we last told it, moved as the kernel moves it:
    down at a short read, up at a write), not at every open."""
    c = Counted(s3_reset, ttl=0)

    async def main():
        fs = c.fs
        kernel = fs.core.kernel = AttrsForgotten()
        ino = await write_file(fs, ROOT, b"f.md", b"AAAAA")
        assert (await fs.getattr(ino, CTX)).st_size == 5  # the kernel holds 5
        kernel.inodes.clear()
        old = await fs.open(ino, os.O_RDONLY, CTX)
        assert kernel.inodes == []  # it holds our size: nothing to drop
        assert await fs.read(old.fh, 0, 4096) == b"AAAAA"
        s3.put_object(Bucket=BUCKET, Key="f.md", Body=b"BBBBBBBBBB")
        # ``old`` reads the 5-byte version through the kernel's page cache, which the size the
        # kernel holds bounds: it stays 5 while ``old`` is open (issue 50; docs/SEMANTICS.md,
        # "One version per read"), or ``old`` would read zeros up to 10.
        assert (await fs.lookup(ROOT, b"f.md", CTX)).st_size == 5
        # A new reader of the 10-byte version gets an inode of its own (ESTALE for the old
        # one; the kernel looks the name up again), or its mapping would fill ``old``'s pages.
        with pytest.raises(pyfuse3.FUSEError) as stale:
            await read_file(fs, ino)
        assert stale.value.errno == errno.ESTALE
        entry = await fs.lookup(ROOT, b"f.md", CTX)  # the kernel's LOOKUP_REVAL
        assert entry.st_ino != ino and entry.st_size == 10
        assert await fs.read(old.fh, 0, 4096) == b"AAAAA"
        await fs.release(old.fh)
        kernel.inodes.clear()
        new = await fs.open(entry.st_ino, os.O_RDONLY, CTX)
        assert kernel.inodes == []  # it holds our size (the lookup's): nothing to drop
        assert await fs.read(new.fh, 0, 4096) == b"BBBBBBBBBB"
        await fs.release(new.fh)
        s3.put_object(Bucket=BUCKET, Key="f.md", Body=b"CCC")
        kernel.inodes.clear()
        new = await fs.open(entry.st_ino, os.O_RDONLY, CTX)  # no page-cache reader left
        assert set(kernel.inodes) == {entry.st_ino}  # 10 held, 3 current: it must ask again
        assert (await fs.getattr(entry.st_ino, CTX)).st_size == 3
        assert await fs.read(new.fh, 0, 4096) == b"CCC"
        await fs.release(new.fh)
    run(main)


def test_a_discarded_write_past_the_end_makes_the_next_open_drop_the_kernels_size(
        counted: Counted) -> None:
    """The kernel grows its cached size at a write past the end, even one a transaction then
    discards: the next open must make it ask again."""
    async def main():
        fs = counted.fs
        kernel = fs.core.kernel = AttrsForgotten()
        ino = await write_file(fs, ROOT, b"f.md", b"AAAAA")
        assert (await fs.getattr(ino, CTX)).st_size == 5
        fi = await fs.open(ino, os.O_RDWR, CTX)
        await fs.setxattr(ino, XATTR_ATOMIC.encode(), b"1", CTX)
        await fs.write(fi.fh, 0, b"a longer text that is discarded")
        await fs.release(fi.fh)  # closed without fsync: nothing happened
        kernel.inodes.clear()
        again = await fs.open(ino, os.O_RDONLY, CTX)
        assert kernel.inodes == [ino]
        assert await fs.read(again.fh, 0, 4096) == b"AAAAA"
        await fs.release(again.fh)
    run(main)


def test_reopen_after_ttl_revalidates_with_a_conditional_get(s3, s3_reset) -> None:
    c = Counted(s3_reset, ttl=0)

    async def main():
        ino = await write_file(c.fs, ROOT, b"r.md", b"data")
        c.take()
        assert await read_file(c.fs, ino) == b"data"
    run(main)
    assert c.take() == {"GetObject": 1}  # answered 304 Not Modified: no body transferred


def test_rename_file_is_copy_and_delete(counted: Counted, s3) -> None:
    async def main():
        fs = counted.fs
        await write_file(fs, ROOT, b"tmp", b"payload")
        await write_file(fs, ROOT, b"target", b"old")
        counted.take()
        await fs.rename(ROOT, b"tmp", ROOT, b"target", 0, CTX)
    run(main)
    assert counted.take() == {"CopyObject": 1, "DeleteObject": 1}
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == ["target"]
    assert s3.get_object(Bucket=BUCKET, Key="target")["Body"].read() == b"payload"


def test_rename_directory_copies_each_object_and_batches_deletes(counted: Counted, s3) -> None:
    for i in range(12):
        s3.put_object(Bucket=BUCKET, Key=f"d/f{i}", Body=str(i).encode())

    async def main():
        fs = counted.fs
        await fs.lookup(ROOT, b"d", CTX)
        await fs.lookup(ROOT, b"e", CTX)
        counted.take()
        await fs.rename(ROOT, b"d", ROOT, b"e", 0, CTX)
    run(main)
    assert counted.take() == {"ListObjectsV2": 1, "CopyObject": 12, "DeleteObjects": 1}
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == sorted(f"e/f{i}" for i in range(12))


def test_chmod_of_a_closed_file_is_one_copy(counted: Counted, s3) -> None:
    async def main():
        fs = counted.fs
        ino = await write_file(fs, ROOT, b"x", b"x")
        counted.take()
        attr = pyfuse3.EntryAttributes()
        attr.st_mode = stat.S_IFREG | 0o600
        # pyfuse3.SetattrFields is read-only from Python; the handler only reads these flags.
        fields = SimpleNamespace(update_atime=False, update_mtime=False, update_ctime=False,
                                 update_mode=True, update_uid=False, update_gid=False,
                                 update_size=False)
        await fs.setattr(ino, attr, fields, None, CTX)
    run(main)
    assert counted.take() == {"CopyObject": 1}
    mode = int(s3.head_object(Bucket=BUCKET, Key="x")["Metadata"]["mode"])
    assert mode == stat.S_IFREG | 0o600


def test_unlink_and_rmdir_costs(counted: Counted, s3) -> None:
    async def main():
        fs = counted.fs
        await write_file(fs, ROOT, b"f", b"1")
        d = await fs.mkdir(ROOT, b"d", 0o755, CTX)
        counted.take()
        await fs.unlink(ROOT, b"f", CTX)
        assert counted.take() == {"DeleteObject": 1}
        await write_file(fs, d.st_ino, b"inner", b"2")
        counted.take()
        with pytest.raises(pyfuse3.FUSEError) as e:
            await fs.rmdir(ROOT, b"d", CTX)
        assert e.value.errno == errno.ENOTEMPTY
        assert counted.take() == {}  # known non-empty from our own listing
        await fs.unlink(d.st_ino, b"inner", CTX)
        await fs.rmdir(ROOT, b"d", CTX)
        assert counted.take() == {"DeleteObject": 2}
    run(main)
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


def test_errors_become_errnos_and_never_escape(counted: Counted, s3) -> None:
    async def main():
        fs = counted.fs
        with pytest.raises(pyfuse3.FUSEError) as e:
            await fs.open(12345, os.O_RDONLY, CTX)
        assert e.value.errno == errno.ENOENT
        ino = await write_file(fs, ROOT, b"f", b"x")
        s3.delete_bucket_policy(Bucket=BUCKET)  # harmless call; the bucket stays
        for obj in s3.list_objects_v2(Bucket=BUCKET)["Contents"]:
            s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
        s3.delete_bucket(Bucket=BUCKET)
        fs.core.content.discard("f")
        fs.core.inodes[ino].validated_at = 0
        with pytest.raises(pyfuse3.FUSEError) as e:
            await read_file(fs, ino)
        assert e.value.errno == errno.ENOENT  # NoSuchBucket
        with pytest.raises(pyfuse3.FUSEError) as e:
            await write_file(fs, ROOT, b"g", b"y")
        assert e.value.errno in (errno.ENOENT, errno.EIO)
    run(main)


def test_pending_file_survives_listing_refresh(s3, s3_reset) -> None:
    c = Counted(s3_reset, ttl=0)

    async def main():
        fs = c.fs
        fi, attrs = await fs.create(ROOT, b"pending", 0o644, os.O_WRONLY, CTX)
        await fs.write(fi.fh, 0, b"not yet uploaded")
        # Another lookup forces a fresh LIST, which cannot contain the pending file...
        found = await fs.lookup(ROOT, b"pending", CTX)
        assert found.st_ino == attrs.st_ino  # ...but the mount still shows it.
        fh = await fs.opendir(ROOT, CTX)
        assert "pending" in [n for n, _ in await fs.core.dir_entries(fh)]
        await fs.releasedir(fh)
        await fs.release(fi.fh)
    run(main)
    assert s3.get_object(Bucket=BUCKET, Key="pending")["Body"].read() == b"not yet uploaded"
