"""`memfs status` on a mount's change feed: the line people read and the Prometheus series."""

from __future__ import annotations

from memfs.cli.status import events_line, events_prometheus

HEALTHY = {"state": "healthy", "feed": "sqs http://q", "reason": "receiving", "ttl_s": 60.0,
           "seen": 12, "applied": 7, "ignored": 5, "published": 3,
           "lag_ms": {"p50": 21.5, "p99": 80.0, "max": 95.0}}


def test_the_line_says_the_state_the_counts_and_the_lag() -> None:
    line = events_line({"events": HEALTHY})
    assert line is not None
    for part in ("healthy", "sqs http://q", "12 seen", "7 applied", "5 ignored", "3 published",
                 "p50 21.5 ms", "p99 80.0 ms", "60.0s"):
        assert part in line, part
    down = events_line({"events": {**HEALTHY, "state": "down", "reason": "queue gone",
                                   "lag_ms": {"p50": None, "p99": None, "max": None}}})
    assert down is not None and "down (queue gone)" in down and "lag" not in down


def test_no_feed_no_line() -> None:
    assert events_line({"events": {"state": "off"}}) is None
    assert events_line({}) is None  # a daemon of an older version


def test_prometheus_one_state_set_counts_and_quantiles() -> None:
    lines = events_prometheus([{"mountpoint": "/m", "events": HEALTHY},
                               {"mountpoint": "/n"}])
    assert 'memfs_events_state{mountpoint="/m",state="healthy"} 1' in lines
    assert 'memfs_events_state{mountpoint="/m",state="down"} 0' in lines
    assert 'memfs_events_state{mountpoint="/n",state="off"} 1' in lines
    assert 'memfs_events_total{mountpoint="/m",result="applied"} 7' in lines
    assert 'memfs_events_lag_seconds{mountpoint="/m",quantile="0.99"} 0.08' in lines
    assert not any('mountpoint="/n",quantile' in line for line in lines)
