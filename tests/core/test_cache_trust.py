"""The content cache trusts only what nobody but the mount's user could have changed (issue #30,
item 1; docs/SEMANTICS.md "What the content cache trusts"): a private tree, sealed records,
bytes checked against the ETag's MD5 or the sealed SHA-256 before their first use after a
restart. Through the kernel and as another user: tests/mount/test_cache_poisoning.py."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.mount.blobs import Blob
from memfs.mount.cachetrust import KEY, CacheUntrusted, md5_of_etag
from memfs.mount.diskcache import RECORDS, DiskCache
from memfs.private_dirs import open_log, private_dirs
from memfs.s3.objectmeta import ObjectInfo

NOBODY = pwd.getpwnam("nobody").pw_uid


def publish(cache: DiskCache, path: str, data: bytes, etag: str, mode: int = 0o100600):
    blob = Blob.from_bytes(cache.staging, data, etag)
    entry = cache.publish(path, blob, ObjectInfo(len(data), etag, 1.0, mode, 0, 0))
    assert entry is not None
    cache.persist(entry)
    return entry


def lines(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "objects" / RECORDS).read_bytes().splitlines()]


def write_lines(root: Path, records: list[dict]) -> None:
    (root / "objects" / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def umask0() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_under_umask_000_the_tree_is_still_private(tmp_path: Path, umask0: None) -> None:
    root = tmp_path / "a" / "b" / "cache" / "content-x"
    cache = DiskCache(root, 1 << 20)
    publish(cache, "f", b"secret memory", '"1"')
    cache.close()
    for d in (tmp_path / "a", tmp_path / "a/b", root.parent, root, root / "objects",
              root / "staging", root / "uploads"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in (root / "lock", root / KEY, *(root / "objects").iterdir()):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


@pytest.mark.parametrize("where", ["cache dir", "content dir", "objects"])
def test_a_directory_another_user_owns_is_refused(tmp_path: Path, where: str) -> None:
    root = tmp_path / "cache" / "content-x"
    DiskCache(root, 1 << 20).close()
    target = {"cache dir": root.parent, "content dir": root, "objects": root / "objects"}[where]
    os.chown(target, NOBODY, -1)
    with pytest.raises(CacheUntrusted) as refused:
        DiskCache(root, 1 << 20)
    assert str(target) in str(refused.value) and "fix:" in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "cache" / "content-x"
    DiskCache(root, 1 << 20).close()
    os.chmod(root, mode)
    with pytest.raises(CacheUntrusted, match="writable by others"):
        DiskCache(root, 1 << 20)


def test_an_ancestor_others_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    private_dirs(shared)
    os.chmod(shared, 0o777)
    with pytest.raises(CacheUntrusted, match=f"{shared} .above"):
        DiskCache(shared / "cache" / "content-x", 1 << 20)
    os.chmod(shared, 0o1777)  # like /tmp: nobody may rename or remove what is not theirs
    DiskCache(shared / "cache" / "content-x", 1 << 20).close()


def test_a_symlinked_content_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "cache" / "content-x").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CacheUntrusted, match="not a directory"):
        DiskCache(tmp_path / "cache" / "content-x", 1 << 20)
    # Refused before anything was made in it (thirteenth hostile review, F46: staging/,
    # objects/ and uploads/ had been made in the symlink's target first).
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_cache_dir_symlinked_into_another_users_directory_gets_nothing_made_there(
        tmp_path: Path) -> None:
    """Fourteenth hostile review, F50: a symlink at (or above) --cache-dir into another user's
    directory got content-<hash> made in it (0700, by root) before the refusal."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    os.chown(victim, 65534, 65534)  # nobody's
    (tmp_path / "cache").symlink_to(victim)
    with pytest.raises(CacheUntrusted, match="belongs to"):
        DiskCache(tmp_path / "cache" / "sub" / "content-x", 1 << 20)
    assert list(victim.iterdir()) == []


def test_private_dirs_makes_nothing_in_another_users_directory(tmp_path: Path) -> None:
    """The log's and the MCP token's directories too (F50): a symlink on the way into another
    user's directory is refused before anything is made there; one into ours is followed."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    os.chown(victim, 65534, 65534)
    (tmp_path / "logs").symlink_to(victim)
    with pytest.raises(PermissionError, match="belongs to uid 65534"):
        private_dirs(tmp_path / "logs" / "memfs" / "deeper")
    assert list(victim.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (tmp_path / "ours").symlink_to(mine)
    private_dirs(tmp_path / "ours" / "memfs")
    assert (mine / "memfs").is_dir()


def test_the_log_is_never_made_in_another_users_directory(tmp_path: Path) -> None:
    """Fifteenth hostile review, F55: `--log-file DIR/d.log` with DIR a symlink another user
    planted into a third user's directory made the log (root's, 0600) there."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    os.chown(victim, 65534, 65534)
    (tmp_path / "logs").symlink_to(victim)
    with pytest.raises(PermissionError, match="belongs to uid 65534"):
        open_log(tmp_path / "logs" / "d.log")
    assert list(victim.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (tmp_path / "ours").symlink_to(mine)
    os.close(open_log(tmp_path / "ours" / "d.log"))  # a symlink into ours is followed
    assert stat.S_IMODE((mine / "d.log").stat().st_mode) == 0o600


def test_a_readable_key_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache" / "content-x"
    DiskCache(root, 1 << 20).close()
    os.chmod(root / KEY, 0o644)
    with pytest.raises(CacheUntrusted, match="key"):
        DiskCache(root, 1 << 20)


def test_a_record_changed_anywhere_is_discarded(tmp_path: Path) -> None:
    """The seal covers the whole record: the mode and owner too, not only the bytes' digest."""
    root = tmp_path / "cache" / "content-x"
    cache = DiskCache(root, 1 << 20)
    publish(cache, "notes.md", b"real memory", '"v1"')
    cache.close()
    (record,) = lines(root)
    record["info"]["mode"] = 0o100777
    write_lines(root, [record])
    again = DiskCache(root, 1 << 20)
    assert again.lookup("notes.md") is None
    again.close()


def test_replaced_bytes_with_a_fixed_digest_are_never_served(tmp_path: Path) -> None:
    """The attack of issue #30: replace a cached file and fix its sha256 in the record."""
    root = tmp_path / "cache" / "content-x"
    cache = DiskCache(root, 1 << 20)
    entry = publish(cache, "notes.md", b"real memory", '"v1"')
    cache.close()
    planted = b"planted text"
    (root / "objects" / f"{entry.name}.data").write_bytes(planted)
    (record,) = lines(root)
    record["sha256"], record["size"] = hashlib.sha256(planted).hexdigest(), len(planted)
    write_lines(root, [record])
    again = DiskCache(root, 1 << 20)
    assert again.lookup("notes.md") is None
    again.close()


def test_a_single_part_entry_is_checked_against_its_etag(tmp_path: Path) -> None:
    """Even with the key (a sealed record that lies), an MD5 ETag is what S3 vouches for."""
    root = tmp_path / "cache" / "content-x"
    real = b"real memory"
    etag = f'"{hashlib.md5(real).hexdigest()}"'
    assert md5_of_etag(etag) == hashlib.md5(real).hexdigest()
    assert md5_of_etag('"0123456789abcdef0123456789abcdef-3"') is None
    cache = DiskCache(root, 1 << 20)
    entry = publish(cache, "notes.md", real, etag)
    planted = b"planted tex"  # same length
    blob = Blob.from_bytes(cache.staging, planted, etag)
    os.replace(blob.path, root / "objects" / f"{entry.name}.data")
    entry.sha256 = None
    cache._write_record(entry, hashlib.sha256(planted).hexdigest())  # sealed with the key
    cache.close()
    again = DiskCache(root, 1 << 20)
    found = again.lookup("notes.md", etag)
    assert found is not None and not again.verify(found)
    again.close()
    good = DiskCache(tmp_path / "c2" / "content-x", 1 << 20)
    entry = publish(good, "notes.md", real, etag)
    good.close()
    again = DiskCache(tmp_path / "c2" / "content-x", 1 << 20)
    found = again.lookup("notes.md", etag)
    assert found is not None and again.verify(found)
    again.close()


def test_a_missing_cache_dir_another_user_plants_as_a_symlink_is_resolved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the second hostile review named: the cache dir's real path was computed before
    a missing directory was made; another user who made it a symlink in between (in a sticky
    /tmp) to a directory that passes the checks (one of the victim's own) had the daemon keep a
    path through their symlink, re-pointable after the checks. Now the path is resolved after
    the directories exist: the daemon uses where the symlink led, whatever it leads to later."""
    shared = tmp_path / "shared"
    private_dirs(shared)
    os.chmod(shared, 0o1777)
    victims = tmp_path / "victims"
    victims.mkdir(mode=0o700)
    planted = shared / "cache"
    real_mkdir = os.mkdir

    def racing_mkdir(path, mode=0o777, **kw):
        if Path(path) == planted and not os.path.lexists(planted):
            planted.symlink_to(victims)  # (the other user's symlink, made between two calls)
        return real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    cache = DiskCache(planted / "content-x", 1 << 20)
    try:
        assert cache.root == victims / "content-x"  # not through the symlink
    finally:
        cache.close()
