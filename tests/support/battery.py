"""A battery of file-handling test suites nobody here wrote, run on a memfs mount (issue 50).

CPython's own tests of shutil, tempfile, mailbox, tarfile, zipfile, … (the running interpreter's
stdlib ``test`` package, so the tests match the library they test) run through ``python -m test``
with their temporary files (``TMPDIR``) and their working directory (``--tempdir``, where
``os_helper.TESTFN`` lives) on a real mount. Every test that fails must be listed in
``tests/battery-expected.toml`` with the docs/SEMANTICS.md section it falls under; anything else
failing is a bug, and so is an expected failure that passes (the list must stay true).

``scripts/reliability battery`` runs every suite (`SUITES`); tests/reliability/test_battery.py runs
`FAST_SUITES` in the suite. Results come from regrtest's JUnit XML (one ``testcase`` per test
method, ``test.test_glob.GlobTests.test_glob_literal``); a suite that dies before writing its
cases (a crash, a timeout) is reported by name from regrtest's summary.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPECTED_FILE = Path(__file__).resolve().parents[1] / "battery-expected.toml"

#: Every suite of the long run: CPython's tests of what reads and writes files.
SUITES = ("test_shutil", "test_tempfile", "test_mailbox", "test_tarfile", "test_zipfile",
          "test_fileinput", "test_glob", "test_pathlib", "test_filecmp", "test_dbm_dumb",
          "test_os", "test_sqlite3", "test_posixpath", "test_fileio", "test_io", "test_mmap")
#: The suite's subset (3 to 5 minutes on the loaded 2-core machine): every limit the long run
#: meets (hard links in test_pathlib; names that are not UTF-8 in test_os, test_posixpath and
#: test_sqlite3; shared writable maps in test_mmap), and test_mailbox, whose trees removed and
#: made again under the same names found two races (issue 50: an older LIST installed over a
#: newer one; the watchers' replay of a removal meeting the name made again). Out: test_tarfile
#: (10 min on moto), test_io (5 min: 2 GiB sparse files), test_shutil, test_zipfile,
#: test_fileio.
FAST_SUITES = ("test_glob", "test_filecmp", "test_fileinput", "test_dbm_dumb",
               "test_tempfile", "test_posixpath", "test_os", "test_sqlite3", "test_pathlib",
               "test_mmap", "test_mailbox")

#: Left out (regrtest's ``--ignore``): mmap's 4 GiB+ sparse files. moto keeps every object in
#: memory, and the harness's in-process moto grew past 18 GB and was killed by the kernel.
IGNORED = ("test.test_mmap.LargeMmapTests.*",)

FAILED = ("failure", "error")


def stdlib_tests_missing() -> str | None:
    """Why this interpreter cannot run its own test suites, or None if it can.

    Debian's ``libpython3.11-testsuite`` belongs to Debian's python3.11, not to this interpreter:
    the tests must be the running one's (``sys.prefix``'s ``lib/python3.X/test``)."""
    spec = importlib.util.find_spec("test.libregrtest")
    if spec is None or spec.origin is None:
        return (f"{sys.executable} has no stdlib test package (test.libregrtest): this "
                "interpreter was installed without its tests")
    return None


@dataclass
class BatteryResult:
    """What one run of the battery found."""

    # test id -> passed, skipped, failure or error
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)  # failing, skipped id -> why
    suites_failed: list[str] = field(default_factory=list)  # regrtest's summary
    suites_crashed: list[str] = field(default_factory=list)  # no test cases in the XML
    seconds: float = 0.0
    returncode: int = 0
    output: str = ""

    def failing(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o in FAILED}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            out[o] = out.get(o, 0) + 1
        return out


def load_expected(path: Path = EXPECTED_FILE, table: str = "expected") -> dict[str, str]:
    """test id -> the docs/SEMANTICS.md section the failure falls under (``table="skips"``: the
    words of a skip reason -> the section that explains why a test skips itself on a mount)."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    expected = data.get(table, {})
    bad = [k for k, v in expected.items() if not isinstance(v, str) or not v.strip()]
    if bad:
        raise ValueError(f"{path}: every entry needs its SEMANTICS section: {bad}")
    return dict(expected)


def parse_junit(xml_text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(test id -> outcome, failing test id -> message) from regrtest's ``--junit-xml``."""
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        name = case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in FAILED:
                outcome = child.tag
                text = child.get("message") or child.text or ""
                messages[name] = text.strip()[-1500:]
                break
            if child.tag == "skipped":
                outcome = "skipped"
                messages[name] = (child.text or "").strip()[:300]
        # A test run twice (a subTest failing) keeps its worst outcome.
        if outcomes.get(name) not in FAILED:
            outcomes[name] = outcome
    return outcomes, messages


def summary_suites(output: str, kind: str) -> list[str]:
    """Suite names regrtest's summary lists after ``N tests <kind>:`` (e.g. "failed")."""
    m = re.search(rf"^\d+ tests? {kind}:\n((?:    .*\n)+)", output, re.M)
    return m[1].split() if m else []


def run(suites: Iterable[str], mount_dir: Path, scratch: Path, *, jobs: int = 2,
        timeout: float = 900.0, env: Mapping[str, str] | None = None) -> BatteryResult:
    """Run `suites` with temporary files and cwd under `mount_dir` (on the mount); the JUnit XML
    and the output go to `scratch` (off the mount)."""
    tmp = mount_dir / "tmp"
    cwd = mount_dir / "cwd"
    tmp.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    xml = scratch / "battery.xml"
    suites = list(suites)
    child_env = {**(os.environ if env is None else env), "TMPDIR": str(tmp)}
    # regrtest's own -u resources stay at their default (no network, no largefile, no cpu).
    args = [sys.executable, "-m", "test", "--junit-xml", str(xml), "--tempdir", str(cwd),
            "--timeout", str(int(timeout)), "-j", str(jobs),
            *(arg for pattern in IGNORED for arg in ("--ignore", pattern)), *suites]
    started = time.monotonic()
    proc = subprocess.run(args, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=timeout * len(suites) + 120)
    result = BatteryResult(seconds=time.monotonic() - started, returncode=proc.returncode,
                           output=proc.stdout)
    (scratch / "battery.out").write_text(proc.stdout)
    if xml.exists():
        result.outcomes, result.messages = parse_junit(xml.read_text(errors="replace"))
    result.suites_failed = summary_suites(proc.stdout, "failed")
    seen = {suite_of(t) for t in result.outcomes}
    result.suites_crashed = [s for s in suites if s not in seen
                             and s not in summary_suites(proc.stdout, "skipped")]
    return result


def run_with_baseline(suites: Iterable[str], mnt: Path, scratch: Path, *, jobs: int = 2,
                      timeout: float = 900.0) -> tuple[BatteryResult, BatteryResult]:
    """`suites` on the mount `mnt`, then on a local directory beside it whose path has the same
    length (tests skip themselves on paths too long for a Unix socket: both runs must meet the
    same lengths); the local one is the baseline `judge` compares skips with."""
    suites = list(suites)
    on_mount = run(suites, mnt / "battery", scratch / "mount", jobs=jobs, timeout=timeout)
    local = mnt.parent / ("l" * len(mnt.name))
    try:
        baseline = run(suites, local / "battery", scratch / "local", jobs=jobs, timeout=timeout)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return on_mount, baseline


@dataclass
class Verdict:
    """A run judged against the expectations: what is wrong, and what was expected."""

    unexpected: dict[str, str]  # failed, not listed: test id -> message
    now_passing: list[str]  # listed, ran, and passed
    expected_seen: dict[str, str]  # listed and failed: test id -> section
    crashed: list[str]  # no results at all, or failed outside every test (setUpClass, import)
    hidden: dict[str, str] = field(default_factory=dict)  # skipped here, passed on a disk: why

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.now_passing or self.crashed or self.hidden)

    def report(self) -> str:
        lines = []
        for t, msg in sorted(self.unexpected.items()):
            lines.append(f"UNEXPECTED FAILURE {t}\n    " + msg.replace("\n", "\n    ")[-800:])
        lines += [f"EXPECTED FAILURE NOW PASSES {t}: drop it from {EXPECTED_FILE.name}"
                  for t in self.now_passing]
        lines += [f"SKIPPED ON THE MOUNT, PASSES ON A LOCAL DISK {t}: {why!r} is no reason "
                  f"listed under [skips] in {EXPECTED_FILE.name}"
                  for t, why in sorted(self.hidden.items())]
        lines += [f"SUITE FAILED OUTSIDE ANY TEST {s}: no results, or a failure in setUpClass "
                  "or at import (see the output)" for s in self.crashed]
        return "\n".join(lines)


def suite_of(test_id: str) -> str:
    """``test.test_os.FileTests.test_write (x=1)`` -> ``test_os``."""
    parts = test_id.split(" ", 1)[0].split(".")
    return parts[1] if len(parts) > 1 else test_id


def judge(result: BatteryResult, expected: Mapping[str, str],
          baseline: BatteryResult | None = None, skips: Mapping[str, str] = {}) -> Verdict:
    """Failures outside `expected`, expected ones that passed, and suites that failed without
    a failing test to show for it (regrtest's XML records no test for a failing setUpClass or
    module import: such a suite must not hide behind its expected failures).

    With a `baseline` (the same suites on a local disk), a test that skips itself on the mount
    but passes there is a failure in disguise ("os.link(): [Errno 1]", "no non-broken extended
    attribute support"): its reason must contain one of `skips`."""
    failing = result.failing()
    failing_suites = {suite_of(t) for t in failing}
    silent = [s for s in result.suites_failed if s not in failing_suites]
    return Verdict(
        unexpected={t: result.messages.get(t, "") for t in failing if t not in expected},
        now_passing=sorted(t for t in expected if result.outcomes.get(t) == "passed"),
        expected_seen={t: expected[t] for t in failing if t in expected},
        crashed=sorted(set(result.suites_crashed) | set(silent)),
        hidden={} if baseline is None else {
            t: result.messages.get(t, "") for t, o in result.outcomes.items()
            if o == "skipped" and baseline.outcomes.get(t) == "passed"
            and not any(words in result.messages.get(t, "") for words in skips)},
    )


def scenario(lab: Any, quick: bool) -> dict[str, Any]:
    """``scripts/reliability battery``: every suite (``--quick``: the fast ones) on a fresh mount
    of `lab`'s moto (tests.support.reliability_run.Lab), judged; the verdict is printed."""
    lab.fresh_bucket()
    mnt, _proc = lab.mount()
    suites = FAST_SUITES if quick else SUITES
    # test_tarfile takes 10 min on moto at load 4, and passed its 15-min timeout at load 8.
    result, baseline = run_with_baseline(suites, mnt, lab.workdir / "battery-out",
                                         timeout=2400)
    keep = Path(lab.workdir).parent / "memfs-battery-last.out"  # outlives the run's tempdir
    keep.write_text(result.output)
    verdict = judge(result, load_expected(), baseline, load_expected(table="skips"))
    print(result.output[-2500:], flush=True)
    print(verdict.report() or "battery: every failure is one SEMANTICS documents", flush=True)
    print(f"regrtest's whole output: {keep}", flush=True)
    clean = lab.unmount_cleanly(mnt)
    return {f"{len(suites)} suites": {
        "suites": list(suites), "counts": result.counts(), "seconds": round(result.seconds),
        "unexpected": sorted(verdict.unexpected), "now_passing": verdict.now_passing,
        "crashed": verdict.crashed, "expected_seen": verdict.expected_seen,
        "hidden_skips": verdict.hidden, "baseline_counts": baseline.counts(),
        "baseline_seconds": round(baseline.seconds),
        "clean_unmount": clean, "ok": verdict.ok and clean}}
