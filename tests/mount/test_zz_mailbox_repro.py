from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import BUCKET


def test_repro(mount_factory, s3, tmp_path: Path) -> None:
    mnt = mount_factory("")
    rounds = int(os.environ.get("ROUNDS", "5"))
    which = os.environ.get("WHICH", "test.test_mailbox")
    for i in range(rounds):
        work = mnt / f"r{i}"
        work.mkdir()
        t = time.time()
        proc = subprocess.run([sys.executable, "-m", "unittest", "-q", which], cwd=work,
                              env={**os.environ, "TMPDIR": str(work)}, capture_output=True,
                              text=True, timeout=900)
        left = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"r{i}/").get(
            "Contents", [])]
        listed = sorted(os.listdir(work))
        print(i, round(time.time() - t), proc.returncode, proc.stderr.strip().splitlines()[-1:],
              "S3:", left[:10], "mount:", listed[:10], flush=True)
        if proc.returncode:
            print(proc.stderr[-3000:])
