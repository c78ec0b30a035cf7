"""``memfs status``: what each memfs mount here is doing, for people, scripts and Prometheus.

Every mount keeps its numbers and hands them out through two extended attributes of its root
(``user.memfs.source``: bucket, prefix, endpoint; ``user.memfs.stats``: pid, uptime, open files,
uploads pending, conflicts, content-cache hits, objects read with invalid metadata, S3 requests
by operation and outcome, retries).
``status`` reads them for the mount given, or for every memfs mount in /proc/self/mountinfo, and
prints a table, JSON (``--json``) or the Prometheus text format (``--prometheus``, e.g. for
node_exporter's textfile collector). Nothing here talks to S3.

A daemon that is stopped, traced or wedged never answers its getxattr, and the kernel waits for
it as long as it lives: every mount is asked from its own thread, all at once, and one that has
not answered within ``--timeout`` is reported as not responding instead of hanging the command
(and a Prometheus scrape) for good. The waiting thread is a daemon thread: at exit the kernel
aborts its request (a FUSE wait is killable), so the command still ends.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, command
from memfs.cli.completion import DIRECTORY, complete_as
from memfs.cli.text import table
from memfs.mountinfo import mount_entries
from memfs.protocol import FSTYPE, XATTR_SOURCE, XATTR_STATS
from memfs.s3.endpoint import Capabilities


def register(sub: Any) -> None:
    s = command(sub, "status", cmd_status, help="what each memfs mount is doing",
                description="Source, daemon pid, uptime, open files, uploads pending, conflicts, "
                "cache hits and S3 requests of each memfs mount on this host (or of MOUNTPOINT).")
    complete_as(s.add_argument("mountpoint", nargs="?",
                               help="one mount (default: every memfs mount)"), DIRECTORY)
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object per mount, in a list")
    fmt.add_argument("--prometheus", action="store_true",
                     help="Prometheus text format (for node_exporter's textfile collector)")
    s.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="how long to wait for a mount's daemon to answer "
                   f"(default {DEFAULT_TIMEOUT_S:g})")


#: A live daemon answers from memory, in milliseconds; this long means it is stopped or wedged.
DEFAULT_TIMEOUT_S = 5.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def read_status(mountpoint: str) -> dict[str, Any]:
    """The mount's source and stats (OSError if it is not a live memfs mount)."""
    source = json.loads(os.getxattr(mountpoint, XATTR_SOURCE))
    stats = json.loads(os.getxattr(mountpoint, XATTR_STATS))
    return {"mountpoint": mountpoint, "source": source, **stats}


class NoAnswer(Exception):
    """The mount's daemon did not answer within the timeout."""


def ask_all(places: list[str], timeout: float) -> dict[str, dict[str, Any] | Exception]:
    """Each mount's status, or why there is none (OSError, NoAnswer), asked concurrently."""
    answers: dict[str, dict[str, Any] | Exception] = {}

    def ask(place: str) -> None:
        try:
            answers[place] = read_status(place)
        except (OSError, ValueError) as exc:
            answers[place] = exc

    threads = [threading.Thread(target=ask, args=(p,), daemon=True, name=f"status {p}")
               for p in places]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {p: answers.get(p, NoAnswer(f"no answer within {timeout:g}s (daemon stopped or "
                                       "wedged?)")) for p in places}


def _why(exc: Exception) -> str:
    return (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)


def source_url(source: dict[str, Any]) -> str:
    return f"s3://{source.get('bucket')}/{source.get('prefix') or ''}"


def prometheus(statuses: list[dict[str, Any]]) -> str:
    """The Prometheus exposition text: one series per mount (label ``mountpoint``)."""
    gauges = {
        "memfs_uptime_seconds": ("gauge", "Seconds since the mount started", "uptime_s"),
        "memfs_open_files": ("gauge", "Open file handles", "open_files"),
        "memfs_pending_uploads": ("gauge", "Files changed and not yet uploaded",
                                  "pending_uploads"),
        "memfs_pending_moves": ("gauge", "Renames between directories S3 has not finished",
                                "pending_moves"),
        "memfs_deferred_moves_total": ("counter", "Renames between directories moved in S3 "
                                       "after rename(2) returned", "deferred_moves"),
        "memfs_conflicts_total": ("counter", "Writes that lost a race (kept as conflict "
                                  "copies)", "conflicts"),
        "memfs_invalid_metadata_total": ("counter", "Objects read whose x-amz-meta-* values "
                                         "were invalid (ignored)", "invalid_metadata"),
        "memfs_s3_retries_total": ("counter", "S3 retries", None),
    }
    lines: list[str] = []
    for name, (kind, help_text, key) in gauges.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for st in statuses:
            value = st["s3"].get("retries", 0) if key is None else st.get(key, 0)
            lines.append(f'{name}{{mountpoint="{_label(st["mountpoint"])}"}} {value}')
    lines += ["# HELP memfs_cache_total Content cache lookups by result",
              "# TYPE memfs_cache_total counter"]
    for st in statuses:
        for result, n in sorted(st.get("cache", {}).items()):
            lines.append(f'memfs_cache_total{{mountpoint="{_label(st["mountpoint"])}",'
                         f'result="{result}"}} {n}')
    for what, help_text in (("bytes", "Bytes the on-disk content cache holds"),
                            ("entries", "Objects the on-disk content cache holds")):
        name = f"memfs_content_cache_{what}"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for st in statuses:
            value = st.get("content_cache", {}).get(what, 0)
            lines.append(f'{name}{{mountpoint="{_label(st["mountpoint"])}"}} {value}')
    lines += ["# HELP memfs_s3_requests_total S3 requests by operation and outcome",
              "# TYPE memfs_s3_requests_total counter"]
    for st in statuses:
        for op, outcomes in sorted(st["s3"].get("requests", {}).items()):
            for outcome, n in sorted(outcomes.items()):
                lines.append(f'memfs_s3_requests_total{{mountpoint="{_label(st["mountpoint"])}",'
                             f'operation="{op}",outcome="{outcome}"}} {n}')
    return "\n".join(lines + events_prometheus(statuses)) + "\n"


#: The states a change feed reports (``memfs.events.change.FeedState``), and "off".
FEED_STATES = ("off", "connecting", "healthy", "down")


def events_prometheus(statuses: list[dict[str, Any]]) -> list[str]:
    """The change feed's series: its state (one gauge per state, 1 for the current one),
    events by what became of them, and the lag of the last ones heard."""
    lines = ["# HELP memfs_events_state The change feed's state (--events), 1 for the current",
             "# TYPE memfs_events_state gauge"]
    for st in statuses:
        now = (st.get("events") or {}).get("state", "off")
        for state in FEED_STATES:
            lines.append(f'memfs_events_state{{mountpoint="{_label(st["mountpoint"])}",'
                         f'state="{state}"}} {int(state == now)}')
    lines += ["# HELP memfs_events_total Change events seen, applied, ignored; and published",
              "# TYPE memfs_events_total counter"]
    for st in statuses:
        ev = st.get("events") or {}
        for what in ("seen", "applied", "ignored", "published"):
            lines.append(f'memfs_events_total{{mountpoint="{_label(st["mountpoint"])}",'
                         f'result="{what}"}} {ev.get(what, 0)}')
    lines += ["# HELP memfs_events_lag_seconds From a change to this mount hearing it "
              "(the last 1,000 events)", "# TYPE memfs_events_lag_seconds gauge"]
    for st in statuses:
        lag = (st.get("events") or {}).get("lag_ms") or {}
        for q, key in (("0.5", "p50"), ("0.99", "p99")):
            if lag.get(key) is not None:
                lines.append(f'memfs_events_lag_seconds{{mountpoint="{_label(st["mountpoint"])}",'
                             f'quantile="{q}"}} {lag[key] / 1000}')
    return lines


def events_line(st: dict[str, Any]) -> str | None:
    """The change feed in one line (``memfs status``), or None without one."""
    ev = st.get("events") or {}
    if ev.get("state", "off") == "off":
        return None
    lag = ev.get("lag_ms") or {}
    lags = (f", lag p50 {lag['p50']} ms p99 {lag['p99']} ms" if lag.get("p50") is not None
            else "")
    why = f" ({ev['reason']})" if ev.get("state") != "healthy" and ev.get("reason") else ""
    return (f"events: {ev['state']}{why}, {ev.get('feed')}; {ev.get('seen', 0)} seen, "
            f"{ev.get('applied', 0)} applied, {ev.get('ignored', 0)} ignored, "
            f"{ev.get('published', 0)} published{lags}; metadata kept {ev.get('ttl_s')}s")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    if args.mountpoint:
        places = [str(Path(args.mountpoint).absolute())]
    else:
        places = [str(e.mountpoint) for e in mount_entries() if e.fstype == FSTYPE]
    statuses = []
    for place, answer in ask_all(places, args.timeout).items():
        if isinstance(answer, dict):
            statuses.append(answer)
        elif args.mountpoint:
            if isinstance(answer, NoAnswer):
                return ctx.fail(f"{place}: {answer}")
            return ctx.fail(f"{place} is not a live memfs mount ({_why(answer)})")
        elif isinstance(answer, NoAnswer):
            ctx.error(f"{place}: {answer}; skipped")
        else:
            ctx.error(f"{place}: no answer ({_why(answer)}); skipped")
    if args.json:
        ctx.say(json.dumps(statuses, indent=1))
    elif args.prometheus:
        ctx.stdout.write(prometheus(statuses))
    elif not statuses:
        ctx.say("no memfs mounts")
    else:
        rows = [[str(v) for v in (
            st["mountpoint"], source_url(st["source"]), st["pid"], f"{st['uptime_s']:.0f}s",
            st["open_files"], st["pending_uploads"], st["conflicts"],
            st.get("cache", {}).get("hits", 0), st["s3"].get("total", 0), _errors(st),
            # PUT/COPY/DELETE sent directly or through boto3 (memfs.s3.route; --json: why)
            st["s3"].get("route", {}).get("writes", "-"))]
            for st in statuses]
        ctx.say(table(["MOUNTPOINT", "SOURCE", "PID", "UP", "OPEN", "PENDING", "CONFLICTS",
                       "CACHE HITS", "S3 REQUESTS", "S3 ERRORS", "WRITES"], rows,
                      right=range(2, 10)))
        for st in statuses:  # what the endpoint does not enforce, and what memfs does instead
            for line in endpoint_notes(st):
                ctx.say(f"{st['mountpoint']}: endpoint: {line}")
            if feed := events_line(st):
                ctx.say(f"{st['mountpoint']}: {feed}")
            if st.get("invalid_metadata"):
                ctx.say(f"{st['mountpoint']}: {st['invalid_metadata']:,} objects read with "
                        "invalid metadata, ignored (the daemon's log names the first)")
    return 0


def endpoint_notes(st: dict[str, Any]) -> list[str]:
    """The mount's findings about its endpoint (``memfs.s3.endpoint``), one line each."""
    found = st.get("endpoint") or {}
    try:
        return Capabilities(**found).summary() if found else []
    except TypeError:  # a daemon of another version: its keys differ
        return []


def _errors(st: dict[str, Any]) -> int:
    return sum(n for outcomes in st["s3"].get("requests", {}).values()
               for outcome, n in outcomes.items() if outcome != "ok")
