"""Re-applying an edit to the newest version after a lost race, while it still means the same.

On a memfs mount an edit (`str_replace`, `insert`) is one transaction: read, change, one
conditional PUT. When another writer commits first the PUT fails (ESTALE). Most such races are
spurious for the agent — a line inserted at the top of a shared log does not depend on which other
lines arrived first — so the handler reads the newest version and applies the command again,
**as long as the command still means the same thing there** (docs/HANDLER.md, "Concurrent
edits"):

* `str_replace`: `old_str` still occurs exactly once (the occurrence the agent meant is the only
  one there can be). Gone, or now ambiguous: refused.
* `insert` at line 0 or at the end of the version read: at line 0 / the end of the newest one.
* `insert` between two lines: where the same two lines are still neighbours, at exactly one place
  in the newest version (the agent chose a spot by what was around it, not by its number). The
  pair edited, split or repeated: refused.

Each attempt is still one conditional write, so nothing is ever lost; attempts are bounded in
number and time and spaced with jitter. `create`, `delete` and `rename` are never re-targeted.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

from memfs.memory import text

#: At most this many attempts (the first included), within this many seconds.
MAX_ATTEMPTS = 8
MAX_SECONDS = 10.0
#: Backoff before attempt n (n >= 2): a random wait up to BASE * 2**(n-2), at most CAP.
BASE_S = 0.02
CAP_S = 1.0


class MeaningChanged(Exception):
    """The command no longer means the same on the newest version; ``str()`` says what
    changed, for the refusal."""


def attempts(clock=time.monotonic, sleep=time.sleep) -> Iterator[int]:
    """Attempt numbers 1, 2, ...: the caller breaks out once one lands. A wait with jitter
    before each retry; no more after MAX_ATTEMPTS, or once MAX_SECONDS have passed."""
    started = clock()
    for n in range(1, MAX_ATTEMPTS + 1):
        if n > 1:
            sleep(random.uniform(0, min(CAP_S, BASE_S * 2 ** (n - 2))))
        yield n
        if clock() - started > MAX_SECONDS:
            return


def replace_once(content: str, old: str) -> int:
    """Where `old` occurs in `content` on a retry: its one offset, or MeaningChanged."""
    found = text.find_first(content, old, 2)
    if not found:
        raise MeaningChanged("old_str no longer appears in it")
    if len(found) > 1:
        raise MeaningChanged("old_str now appears more than once in it")
    return found[0]


def insert_at(read_lines: list[str], at: int, newest: list[str]) -> int:
    """Where an insert at line `at` of the version read (`read_lines`) goes in the newest
    version (`newest`), or MeaningChanged (see the module docstring)."""
    if at == 0:
        return 0
    if at == len(read_lines):
        return len(newest)
    before, after = read_lines[at - 1], read_lines[at]
    places = [j for j in range(1, len(newest)) if newest[j - 1] == before and newest[j] == after]
    if len(places) == 1:
        return places[0]
    if not places:
        raise MeaningChanged(f"lines {at} and {at + 1} of the version read are no longer "
                             "next to each other in it")
    raise MeaningChanged(f"lines {at} and {at + 1} of the version read now appear together "
                         f"{len(places)} times in it")
