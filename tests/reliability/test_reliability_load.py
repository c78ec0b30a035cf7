"""Reliability under load: 8 concurrent agents on one mount, and across two mounts.

Owns issue 6 point 6 in CI (40 commands per agent; ``scripts/reliability load`` runs 8 x 250).
Each agent works in its own directory, so there is no designed conflict here (storms on shared
files are ``test_reliability_conflicts.py``): no command may fail, every view must show what was
acknowledged, S3 must hold exactly the acknowledged state, and the daemon's peak RSS (VmHWM)
must stay bounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.memory import MemoryHandler
from tests.conftest import BUCKET
from tests.support.agents import SoloAgent, Stats, check_solo, run_threads, s3_objects, vm_hwm_kb

AGENTS = 8
COMMANDS = 40
RSS_BOUND_KB = 400 * 1024  # generous: the daemon's working set is small memory files


def run_agents(mounts: list[Path], agents: int, commands: int, seed: int = 0) -> list[SoloAgent]:
    crew = [SoloAgent(MemoryHandler(mounts[i % len(mounts)]), f"agent{i}", seed=seed + i)
            for i in range(agents)]
    hung = run_threads([lambda a=a: a.run(commands) for a in crew], timeout_s=240)
    assert hung == []
    return crew


@pytest.mark.parametrize("mounts", [1, 2], ids=["one-mount", "two-mounts"])
def test_eight_agents_at_once(mount_factory, s3, mounts: int) -> None:
    paths = [mount_factory("") for _ in range(mounts)]
    crew = run_agents(paths, AGENTS, COMMANDS)
    stats = Stats()
    for a in crew:
        stats.merge(a.stats)
    assert stats.commands >= AGENTS * COMMANDS
    assert stats.unexpected == []
    assert stats.violations == []
    assert dict(stats.errors) == {}, stats.samples
    assert check_solo(crew, s3_objects(s3, BUCKET)) == []
    for proc, _mnt, _log in mount_factory.procs:
        peak = vm_hwm_kb(proc.pid)
        assert 0 < peak < RSS_BOUND_KB
