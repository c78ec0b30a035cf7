"""CPython's own file-handling tests, run on a memfs mount, fail only where SEMANTICS says
(issue 50). The long run is ``scripts/reliability battery`` (every suite of
`tests.support.battery.SUITES`); this is its fast subset.

The test fails when a test fails that ``tests/battery-expected.toml`` does not list (a bug, or a
limit nobody wrote down), when a listed test passes (the list must stay true), when a test skips
itself on the mount but passes on a local disk for a reason the file does not list, when a suite
dies without results, or when the daemon logs a traceback. Without the interpreter's stdlib ``test``
package it skips with the reason, except under ``CI=true``, where it fails; a mount that does
not come up is an error, as everywhere in the mount tiers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support import battery


def require_stdlib_tests(env: Mapping[str, str] = os.environ) -> None:
    why = battery.stdlib_tests_missing()
    if why is None:
        return
    if env.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why} (CI=true: the battery must run)")
    pytest.skip(why)


def test_the_expectations_name_a_semantics_section_each() -> None:
    expected = battery.load_expected() | battery.load_expected(table="skips")
    semantics = (Path(__file__).resolve().parents[2] / "docs" / "SEMANTICS.md").read_text()
    headings = {line.lstrip("#").strip() for line in semantics.splitlines()
                if line.startswith("#")}
    for test_id, section in expected.items():
        heading = section.split(":", 1)[0].strip()
        assert heading in headings, f"{test_id}: {heading!r} is no heading of docs/SEMANTICS.md"


@pytest.mark.timeout(900)
def test_the_fast_battery_fails_only_where_semantics_says(mount_factory, tmp_path: Path) -> None:
    require_stdlib_tests()
    mnt = mount_factory("")
    result, baseline = battery.run_with_baseline(battery.FAST_SUITES, mnt, tmp_path / "out",
                                                 timeout=600)
    verdict = battery.judge(result, battery.load_expected(), baseline,
                            battery.load_expected(table="skips"))
    print(result.counts(), f"{result.seconds:.0f} s; local disk:", baseline.counts(),
          f"{baseline.seconds:.0f} s")
    assert result.outcomes, f"no test results:\n{result.output[-4000:]}"
    assert verdict.ok, verdict.report() + "\n" + result.output[-3000:]
    assert result.counts().get("passed", 0) > 400, result.counts()
    assert mount_factory.tracebacks() == 0, "the daemon logged a traceback"
