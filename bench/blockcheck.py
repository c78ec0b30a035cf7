"""What checking every cached block costs the read path (issue 50): ``Blob.read`` against
``Blob.read_checked`` over a 256 MiB cached version, sequential at the kernel's read sizes and
at random 4 KiB, in process CPU time; with google-crc32c if installed, else zlib.crc32
(``--zlib`` forces it). ``python -m bench.blockcheck [--zlib]``."""

from __future__ import annotations

import builtins
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

if "--zlib" in sys.argv:  # the fallback, as a mount without google-crc32c runs it
    _real_import = builtins.__import__

    def _no_crc32c(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "google_crc32c":
            raise ImportError(name)
        return _real_import(name, *args, **kwargs)

    builtins.__import__ = _no_crc32c

import memfs.mount.blocksums as bs  # (after the import hook above)
from memfs.mount.blobs import Blob

SIZE = 256 * 1024 * 1024


def _seq(blob: Blob, read, n: int) -> float:  # type: ignore[no-untyped-def]
    t = time.process_time()
    for off in range(0, SIZE, n):
        read(blob, off, n)
    return time.process_time() - t


def _rnd(blob: Blob, read, n: int, count: int = 20000) -> float:  # type: ignore[no-untyped-def]
    r = random.Random(1)
    t = time.process_time()
    for _ in range(count):
        read(blob, r.randrange(0, SIZE - n), n)
    return (time.process_time() - t) / count * 1e6


def main() -> None:
    d = Path(tempfile.mkdtemp(prefix="memfs-blockcheck-"))
    try:
        data = os.urandom(SIZE)
        blob = Blob.from_bytes(d, data, etag="e")  # a version: summed from memory
        t = time.process_time()
        bs.BlockSums(SIZE).take_from(0, data)  # what caching (a GET, a ranged GET) adds
        print(f"{bs.ALGORITHM}: summing 256 MiB as it arrives: {time.process_time() - t:.3f} s "
              "CPU")
        del data
        for name, n in (("128 KiB", 128 * 1024), ("1 MiB", 1024 * 1024)):
            a, c = _seq(blob, Blob.read, n), _seq(blob, Blob.read_checked, n)
            print(f"{bs.ALGORITHM}: sequential {name} reads of 256 MiB: {a:.3f} s -> {c:.3f} s "
                  f"CPU (+{(c - a) / 256 * 1000:.2f} ms per MiB)")
        a, c = _rnd(blob, Blob.read, 4096), _rnd(blob, Blob.read_checked, 4096)
        print(f"{bs.ALGORITHM}: random 4 KiB reads: {a:.1f} -> {c:.1f} µs each")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
