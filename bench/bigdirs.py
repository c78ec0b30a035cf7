"""Big directories, side by side: memfs and s3fs-fuse on one directory of N objects.

For each mount kind, on its own bucket (pre-filled with N one-byte objects under ``big/``) and
through the counting proxy: the first ``ls`` of the directory; once the listing has expired
(memfs: ``--metadata-ttl``, 1 s by default), a ``cat``, a ``stat`` and a ``touch`` of single names
in it; then ``tar -x`` of an archive of N files into an empty directory. Each row gives S3
requests by type and wall time; the last columns are the ratios memfs / s3fs. Run::

    python -m bench.bigdirs --files 20000 [--kinds memfs,s3fs] [--label memfs=after]

``--pythonpath KIND=DIR`` runs a leg's ``python -m memfs`` from another checkout (e.g. the code
before a change, for a before/after table).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import targets
from tests.support.s3proxy import S3Proxy


def _run(args: list[str]) -> None:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def steps(mnt: Path, archive: Path, ttl_wait: float) -> list[tuple[str, Callable[[], None]]]:
    big = mnt / "big"
    return [
        ("first ls of big/", lambda: _run(["ls", "-f", str(big)])),
        ("(listing expires)", lambda: time.sleep(ttl_wait)),
        ("cat one file", lambda: _run(["cat", str(big / "f00001")])),
        ("stat one file", lambda: _run(["stat", str(big / "f00002")])),
        ("touch a new file", lambda: _run(["touch", str(big / "new-file")])),
        ("tar -x into x/", lambda: (os.mkdir(mnt / "x"),
                                    _run(["tar", "-xf", str(archive), "-C", str(mnt / "x")]))),
    ]


def make_archive(workdir: Path, n: int) -> Path:
    src = workdir / "src"
    src.mkdir()
    for i in range(n):
        (src / f"t{i:05d}").write_bytes(b"x")
    archive = workdir / "files.tar"
    with tarfile.open(archive, "w") as tar:
        for i in range(n):
            tar.add(src / f"t{i:05d}", arcname=f"t{i:05d}")
    return archive


def leg(kind: str, moto: str, proxy: S3Proxy, n: int, archive: Path, workdir: Path,
        pythonpath: str | None) -> list[tuple[str, dict[str, int], float]]:
    bucket = f"bigdir-{kind}-{int(time.time() * 1000) % 10**8}"
    targets.create_bucket(moto, bucket)
    targets.populate(moto, bucket, [f"big/f{i:05d}" for i in range(n)], b"x")
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
    if pythonpath:
        # PYTHONSAFEPATH: `python -m` would otherwise put the working directory (this checkout)
        # ahead of PYTHONPATH, and the leg would quietly run this code.
        os.environ.update(PYTHONPATH=pythonpath, PYTHONSAFEPATH="1")
    rows = []
    try:
        with targets.mounted(kind, bucket, proxy.url, workdir) as mnt:
            for name, fn in steps(mnt, archive, ttl_wait=1.5):
                proxy.reset_counts()
                t0 = time.monotonic()
                fn()
                seconds = time.monotonic() - t0
                if name.startswith("("):
                    continue
                rows.append((name, {k: v for k, v in proxy.counts().items() if v}, seconds))
                print(f"  {kind}: {name}: {sum(rows[-1][1].values())} requests, "
                      f"{seconds:.2f} s", file=sys.stderr, flush=True)
    finally:
        if pythonpath:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return rows


def fmt_counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bigdirs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--kinds", default="memfs,s3fs")
    parser.add_argument("--pythonpath", action="append", default=[], metavar="KIND=DIR")
    parser.add_argument("--label", action="append", default=[], metavar="KIND=NAME")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    paths = dict(p.split("=", 1) for p in args.pythonpath)
    labels = dict(p.split("=", 1) for p in args.label)
    results: dict[str, list[tuple[str, dict[str, int], float]]] = {}
    with tempfile.TemporaryDirectory(prefix="memfs-bigdirs-") as tmp, \
            targets.moto_server() as moto, S3Proxy(moto) as proxy:
        work = Path(tmp)
        archive = make_archive(work, args.files)
        for kind in kinds:
            results[kind] = leg(kind.split("@")[0], moto, proxy, args.files, archive, work,
                                paths.get(kind))
    names = [labels.get(k, k) for k in kinds]
    print(f"\nOne directory of {args.files:,} objects (requests by type; wall time)\n")
    print("| step | " + " | ".join(f"{n} requests | {n} s" for n in names) + " |")
    print("|---|" + "---|---|" * len(names))
    for i, (step, _, _) in enumerate(results[kinds[0]]):
        cells = []
        for kind in kinds:
            _, counts, seconds = results[kind][i]
            cells += [f"{sum(counts.values()):,} ({fmt_counts(counts)})", f"{seconds:.2f}"]
        print(f"| {step} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
