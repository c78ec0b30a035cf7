"""Big files through the mount: staged on disk, multipart up, ranged down, cached across restarts.

Every test mounts with ``--part-size 5M`` (S3's smallest part), so files of a few tens of MiB
take the multipart and ranged paths that multi-GiB files take in ``scripts/bench bigfiles``. The
S3 side is checked with boto3 behind the mount's back, and requests and bytes are counted by the
proxy the mount talks through.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET, needs_moto
from tests.support.mounts import memfs_cmd
from tests.support.s3proxy import FaultRule, Faults, S3Proxy

MIB = 1024 * 1024
PART = ("--part-size", "5M")


def _pattern(size: int, seed: int = 0) -> bytes:
    """Bytes that differ at every MiB, so a misplaced range cannot pass for the right one."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MIB // 32)
    return b"".join(i.to_bytes(8, "big") + block[8:] for i in range(size // MIB + 1))[:size]


def _s3_bytes(s3, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _get_bytes(proxy: S3Proxy) -> int:
    return sum(r.bytes_out for r in proxy.records() if r.op == "GET")


def _vm_hwm_kib(mounts, mnt: Path) -> int:
    pid = mounts._find(mnt).proc.pid
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@needs_moto("a server that conditions CompleteMultipartUpload (Ceph RGW 16.2 does not, so "
            "memfs writes big files there with one conditional PUT: no parts)")
def test_a_big_file_goes_up_in_parts_and_comes_back_whole(mounts, proxy, s3) -> None:
    mnt = mounts("", *PART)
    data = _pattern(23 * MIB + 12345)
    (mnt / "big.bin").write_bytes(data)
    counts = proxy.counts()
    assert counts.get("MPU_CREATE") == 1 and counts.get("MPU_COMPLETE") == 1, counts
    assert counts.get("MPU_PART") == 5, counts  # ceil(23.01 / 5)
    assert _s3_bytes(s3, "big.bin") == data
    assert "-" in s3.head_object(Bucket=BUCKET, Key="big.bin")["ETag"]  # a multipart object
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
    # A second mount (cold cache) reads it back through ranged GETs.
    other = mounts("", *PART)
    proxy.reset_counts()
    assert (other / "big.bin").read_bytes() == data
    assert proxy.counts().get("GET", 0) >= 2


def test_head_of_a_big_object_fetches_a_few_mib_not_the_object(mounts, proxy, s3) -> None:
    data = _pattern(40 * MIB)
    s3.put_object(Bucket=BUCKET, Key="huge.bin", Body=data)
    mnt = mounts("", *PART)
    proxy.reset_counts()
    out = subprocess.run(["head", "-c", "100", str(mnt / "huge.bin")], capture_output=True,
                         check=True).stdout
    assert out == data[:100]
    assert _get_bytes(proxy) <= 8 * MIB, proxy.counts()
    # A read in the middle fetches around it only, and returns the right bytes.
    with open(mnt / "huge.bin", "rb") as f:
        f.seek(31 * MIB + 7)
        assert f.read(5000) == data[31 * MIB + 7:31 * MIB + 7 + 5000]
    assert _get_bytes(proxy) <= 12 * MIB, proxy.counts()


def test_writing_into_the_middle_of_a_big_file_keeps_the_rest(mounts, proxy, s3) -> None:
    data = bytearray(_pattern(17 * MIB, seed=1))
    s3.put_object(Bucket=BUCKET, Key="mid.bin", Body=bytes(data))
    mnt = mounts("", *PART)
    patch = b"PATCHED" * 1000
    with open(mnt / "mid.bin", "r+b") as f:  # nothing read before: the rest is fetched at close
        f.seek(9 * MIB + 3)
        f.write(patch)
    data[9 * MIB + 3:9 * MIB + 3 + len(patch)] = patch
    assert _s3_bytes(s3, "mid.bin") == bytes(data)
    # Growing it past its end with a hole, and truncating it back, as a disk would.
    with open(mnt / "mid.bin", "r+b") as f:
        f.seek(20 * MIB)
        f.write(b"tail")
    expect = bytes(data) + bytes(20 * MIB - len(data)) + b"tail"
    assert _s3_bytes(s3, "mid.bin") == expect
    os.truncate(mnt / "mid.bin", 6 * MIB)
    assert _s3_bytes(s3, "mid.bin") == expect[:6 * MIB]
    assert (mnt / "mid.bin").read_bytes() == expect[:6 * MIB]


def test_truncating_a_big_file_fetches_only_what_it_keeps(mounts, proxy, s3) -> None:
    data = _pattern(30 * MIB, seed=2)
    s3.put_object(Bucket=BUCKET, Key="cut.bin", Body=data)
    mnt = mounts("", *PART)
    proxy.reset_counts()
    os.truncate(mnt / "cut.bin", 3 * MIB + 5)
    assert _s3_bytes(s3, "cut.bin") == data[:3 * MIB + 5]
    assert _get_bytes(proxy) < 4 * MIB, proxy.counts()
    assert proxy.counts().get("PUT") == 1  # below the part size: one PUT


def test_memory_does_not_grow_with_the_file(mounts, s3, tmp_path: Path) -> None:
    """200 MiB through `dd bs=1M` and back: the daemon's peak RSS stays below the file's size
    (it held the whole file, twice, before the data path moved to disk; now: the interpreter,
    about 60 MiB, plus the parts in flight)."""
    mnt = mounts("", *PART)
    src = tmp_path / "src.bin"
    with open(src, "wb") as f:
        for i in range(200):
            f.write(_pattern(MIB, seed=i))
    subprocess.run(["dd", f"if={src}", f"of={mnt / 'dd.bin'}", "bs=1M", "status=none"],
                   check=True)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    out = subprocess.run(["sha256sum", str(mnt / "dd.bin")], capture_output=True, text=True,
                         check=True).stdout
    assert out.split()[0] == digest
    assert hashlib.sha256(_s3_bytes(s3, "dd.bin")).hexdigest() == digest
    hwm_mib = _vm_hwm_kib(mounts, mnt) / 1024
    assert hwm_mib < 160, f"daemon peak RSS {hwm_mib:.0f} MiB for a 200 MiB file"


def test_a_restart_keeps_the_cache_and_refetches_only_what_changed(mounts, proxy, s3) -> None:
    mnt = mounts("", *PART)
    (mnt / "d").mkdir()
    files = {f"d/f{i}.txt": f"line {i} marker\n".encode() * (i + 1) for i in range(30)}
    files["d/big.bin"] = _pattern(12 * MIB, seed=3)
    for name, data in files.items():
        (mnt / name).write_bytes(data)
    for name, data in files.items():
        assert (mnt / name).read_bytes() == data
    mounts.unmount(mnt)

    mnt = mounts("", *PART, mountpoint=mnt)
    proxy.reset_counts()
    for name, data in files.items():
        assert (mnt / name).read_bytes() == data
    counts = proxy.counts()
    # Listings tell the ETags; the bytes and the attributes come from the cache. (A HEAD may
    # revalidate an attribute whose --metadata-ttl ran out meanwhile: no content moves.)
    assert counts.get("GET", 0) == 0, counts
    assert counts.get("LIST", 0) >= 1

    s3.put_object(Bucket=BUCKET, Key="d/f7.txt", Body=b"changed behind the mount\n")
    time.sleep(1.5)  # past --metadata-ttl
    proxy.reset_counts()
    for name, data in files.items():
        want = b"changed behind the mount\n" if name == "d/f7.txt" else data
        assert (mnt / name).read_bytes() == want
    gets = [r.target for r in proxy.records() if r.op == "GET"]
    assert len(gets) == 1 and "f7.txt" in gets[0], gets


def test_a_damaged_cache_entry_is_discarded_not_served(mounts, proxy, s3, tmp_path) -> None:
    mnt = mounts("", *PART)
    data = b"the true content\n" * 100
    (mnt / "f.txt").write_bytes(data)
    assert (mnt / "f.txt").read_bytes() == data
    mounts.unmount(mnt)
    cached = list((tmp_path / "cache").glob("content-*/objects/*.data"))
    assert len(cached) == 1
    # Same size, other bytes: only the checksum can tell.
    cached[0].write_bytes(b"X" * len(data))
    mnt = mounts("", *PART, mountpoint=mnt)
    proxy.reset_counts()
    assert (mnt / "f.txt").read_bytes() == data
    assert proxy.counts().get("GET") == 1
    assert "damaged" in mounts.log(mnt)


def test_two_mounts_never_share_a_cache_directory(mounts, tmp_path: Path) -> None:
    mnt = mounts("", *PART)
    mounts.unmount(mnt)
    lock = next((tmp_path / "cache").glob("content-*/lock"))
    with open(lock, "r+") as held:  # as a live mount of the same source and mountpoint would
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        out = subprocess.run(
            [*memfs_cmd(), "mount",
             str(mnt), "--bucket", BUCKET, "--endpoint-url", mounts.endpoint, "--foreground",
             "--cache-dir", str(tmp_path / "cache")],
            capture_output=True, text=True, timeout=60, env=mounts.base_env())
    assert out.returncode != 0
    assert "in use by another memfs mount (pid 4242)" in out.stderr
    assert "--cache-dir" in out.stderr


def test_sizes_nothing_can_hold_are_refused_and_the_mount_lives_on(mounts, s3) -> None:
    mnt = mounts("", *PART)
    (mnt / "f").write_bytes(b"keep me\n")
    with pytest.raises(OSError) as too_big:
        os.truncate(mnt / "f", 999_999_999_999_999)  # past S3's 5 TiB
    assert too_big.value.errno == errno.EFBIG
    free = os.statvfs(mnt.parent).f_bavail * os.statvfs(mnt.parent).f_frsize
    if free < 4 * 1024**4:
        with pytest.raises(OSError) as no_room:
            os.truncate(mnt / "f", 4 * 1024**4)  # S3 could hold it; this disk cannot stage it
        assert no_room.value.errno == errno.ENOSPC
    assert (mnt / "f").read_bytes() == b"keep me\n"
    assert _s3_bytes(s3, "f") == b"keep me\n"
    log = mounts.log(mnt)
    assert "EFBIG" in log and "Traceback" not in log


def test_a_lost_race_on_a_big_file_keeps_the_losers_bytes(mount_factory, s3, s3_reset) -> None:
    """Two mounts rewrite one multipart object from the same version: the second completion
    fails its If-Match (enforced by the proxy as AWS does; moto alone does not), and its bytes
    land under .memfs-conflicts/ — nothing is silently lost."""
    with S3Proxy(s3_reset, enforce_multipart_conditions=True) as proxy:
        mount_factory.endpoint = proxy.url
        base = _pattern(11 * MIB, seed=5)
        s3.put_object(Bucket=BUCKET, Key="shared.bin", Body=base)
        a = mount_factory("", *PART)
        b = mount_factory("", *PART)
        fa = open(a / "shared.bin", "r+b", buffering=0)  # noqa: SIM115 (both open at once)
        fb = open(b / "shared.bin", "r+b", buffering=0)  # noqa: SIM115
        fa.write(b"A" * 100)
        fb.write(b"B" * 100)
        fa.close()
        with pytest.raises(OSError) as lost:
            fb.close()
        assert lost.value.errno == errno.ESTALE
        assert _s3_bytes(s3, "shared.bin") == b"A" * 100 + base[100:]
        kept = s3.list_objects_v2(Bucket=BUCKET, Prefix=".memfs-conflicts/").get("Contents")
        assert kept and len(kept) == 1, mount_factory.log(b)[-3000:]
        assert _s3_bytes(s3, kept[0]["Key"]) == b"B" * 100 + base[100:]
        assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


@needs_moto("a server that conditions CompleteMultipartUpload (Ceph RGW 16.2 does not, so "
            "memfs writes big files there with one conditional PUT: no parts)")
def test_a_killed_upload_leaves_no_parts_after_the_next_mount(mounts, proxy, s3) -> None:
    mnt = mounts("", *PART)
    stall = FaultRule(op="MPU_PART", kind="stall", times=100)
    proxy.set_faults(Faults(stall_s=20.0, rules=(stall,)))
    writer = subprocess.Popen(["dd", "if=/dev/zero", f"of={mnt / 'k.bin'}", "bs=1M",
                               "count=16", "status=none"])
    deadline = time.time() + 30
    while not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads"):
        assert time.time() < deadline, "the upload never started"
        time.sleep(0.1)
    daemon = mounts._find(mnt).proc
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.wait()
    writer.kill()
    writer.wait()
    mounts.detach(mnt)
    proxy.set_faults(None)
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
    mounts("", *PART, mountpoint=mnt)
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_a_full_cache_disk_refuses_the_write_it_cannot_stage(mounts, s3, tmp_path) -> None:
    """The cache directory on a 24 MiB tmpfs: a 64 MiB write fails with ENOSPC, the daemon
    lives on, and what was acknowledged before is intact in S3 and through the mount."""
    small = tmp_path / "small"
    small.mkdir()
    # mode=0700: a cache directory others may write to is refused (memfs.mount.cachetrust)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", str(small)],
                   check=True)
    try:
        mnt = mounts("", *PART, "--cache-dir", str(small))
        kept = _pattern(3 * MIB, seed=7)
        (mnt / "kept.bin").write_bytes(kept)
        with pytest.raises(OSError) as full, open(mnt / "huge.bin", "wb") as f:
            for i in range(64):
                f.write(_pattern(MIB, seed=i))
        assert full.value.errno == errno.ENOSPC
        assert (mnt / "kept.bin").read_bytes() == kept
        assert _s3_bytes(s3, "kept.bin") == kept
        assert "ENOSPC" in mounts.log(mnt)
        mounts.unmount(mnt)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


@pytest.mark.parametrize("exists", [False, True], ids=["new", "overwrite"])
def test_two_mounts_racing_on_one_big_file_lose_nothing_silently(mount_factory, s3,
                                                                 exists: bool) -> None:
    """Two mounts write a 12 MiB file (above the part size) to one path at once: S3 holds one
    writer's whole file, and the other writer's bytes are in its conflict folder or its close
    failed. On an endpoint that conditions multipart completion the bytes go in parts; on one
    that does not (Ceph RGW 16.2) as one conditional PUT — either way no acknowledged write is
    undone. Talks to the suite's server directly (no proxy), so it runs on Ceph as on moto."""
    a = mount_factory("", *PART, "--metadata-ttl", "30")
    b = mount_factory("", *PART, "--metadata-ttl", "30")
    if exists:
        (a / "race.bin").write_bytes(b"old")
        assert (b / "race.bin").read_bytes() == b"old"  # both now hold the old version
    blobs = {name: os.urandom(12 * MIB) for name in "ab"}
    outcomes: dict[str, OSError | None] = {}

    def write(name: str, where: Path) -> None:
        try:
            with open(where / "race.bin", "wb") as f:
                f.write(blobs[name])
            outcomes[name] = None
        except OSError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=write, args=(n, m)) for n, m in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    held = s3.get_object(Bucket=BUCKET, Key="race.bin")["Body"].read()
    winners = [n for n, blob in blobs.items() if blob == held]
    assert len(winners) == 1, "S3 holds neither writer's whole file"
    loser = "b" if winners == ["a"] else "a"
    assert outcomes[winners[0]] is None
    conflicts = [o["Key"] for o in s3.list_objects_v2(
        Bucket=BUCKET, Prefix=".memfs-conflicts/").get("Contents", [])]
    kept = [s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() == blobs[loser]
            for k in conflicts]
    assert outcomes[loser] is not None or any(kept), (outcomes, conflicts)
    if outcomes[loser] is not None:
        assert outcomes[loser].errno == errno.ESTALE
        assert any(kept), "the loser's close failed and its bytes are nowhere"
