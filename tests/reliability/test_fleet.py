"""The fleet workload (bench/fleet.py) at a small size: two mounts standing for two machines, two
agents on each, every step an insert at line 0 of one shared log. Nothing acknowledged is lost,
nothing refused is in the file, and the agents see (almost) no refusals: a line inserted at the
top does not depend on which other lines arrived first (memfs.memory.reapply)."""

from __future__ import annotations

from bench.fleet import run


def test_a_small_fleet_loses_nothing_and_agents_see_few_refusals() -> None:
    row = run(m=2, k=2, steps=6, ttl="1", rtt_ms=0.0, probes=2, idle_s=1.0)
    assert row["problems"] == []
    assert row["lost"] == 0
    assert row["other errors"] == 0
    assert row["team acked"] > 0
    assert row["refused/ack"] <= 0.05, row
    assert row["conflict copies"] == 0
