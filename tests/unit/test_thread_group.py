"""``thread_group``: which process a FUSE request's thread id belongs to, cached and checked."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from memfs.mount import state
from memfs.mount.state import thread_group


def test_a_thread_belongs_to_its_process_asked_again_and_again() -> None:
    found: list[int] = []

    def ask() -> None:
        tid = threading.get_native_id()
        found.extend(thread_group(tid) for _ in range(3))  # read, then from the cache

    t = threading.Thread(target=ask)
    t.start()
    t.join()
    assert found == [os.getpid()] * 3
    assert thread_group(os.getpid()) == os.getpid()


def test_a_kept_answer_that_no_longer_holds_is_read_again(monkeypatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # As if the id had belonged to another process (since exited) when last asked.
        monkeypatch.setitem(state._groups, child.pid, os.getpid())
        assert thread_group(child.pid) == child.pid
        assert state._groups[child.pid] == child.pid
    finally:
        child.kill()
        child.wait()
    assert thread_group(child.pid) == child.pid, "a gone id answers itself"
    assert child.pid not in state._groups, "the stale answer was kept"
