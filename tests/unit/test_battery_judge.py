"""The battery's judge (tests/support/battery.py): regrtest's JUnit XML and summary read right,
and every way a run can go wrong — an unlisted failure, a listed test that passes, a suite that
fails outside any test — makes the verdict fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import battery

XML = """<testsuites tests="5" errors="1" failures="1"><testsuite tests="5">
<testcase name="test.test_os.FileTests.test_write" status="run" result="completed" time="0.1" />
<testcase name="test.test_os.LinkTests.test_link" status="run" result="completed" time="0.1">
<system-out /><failure type="PermissionError" message="PermissionError: [Errno 1]">tb</failure>
</testcase>
<testcase name="test.test_os.X.test_y (n=2)" status="run" result="completed" time="0.1">
<error type="OSError" message="OSError: [Errno 22] Invalid argument">tb</error></testcase>
<testcase name="test.test_glob.GlobTests.test_escape_windows" status="run" result="completed">
<skipped>Win32 specific test</skipped></testcase>
<testcase name="test.test_glob.GlobTests.test_glob_literal" status="run" result="completed" />
</testsuite></testsuites>"""

SUMMARY = """== Tests result: FAILURE ==

1 test OK.

2 tests failed:
    test_os test_shutil

Total duration: 2.0 sec
"""


def result() -> battery.BatteryResult:
    outcomes, messages = battery.parse_junit(XML)
    return battery.BatteryResult(outcomes=outcomes, messages=messages,
                                 suites_failed=battery.summary_suites(SUMMARY, "failed"))


def test_the_xml_gives_each_test_its_outcome_and_message() -> None:
    r = result()
    assert r.outcomes == {
        "test.test_os.FileTests.test_write": "passed",
        "test.test_os.LinkTests.test_link": "failure",
        "test.test_os.X.test_y (n=2)": "error",
        "test.test_glob.GlobTests.test_escape_windows": "skipped",
        "test.test_glob.GlobTests.test_glob_literal": "passed",
    }
    assert r.messages["test.test_os.LinkTests.test_link"].startswith("PermissionError")
    assert r.failing() == {"test.test_os.LinkTests.test_link", "test.test_os.X.test_y (n=2)"}
    assert r.counts() == {"passed": 2, "failure": 1, "error": 1, "skipped": 1}
    assert battery.summary_suites(SUMMARY, "failed") == ["test_os", "test_shutil"]
    assert battery.summary_suites("All 5 tests OK.\n", "failed") == []
    assert battery.suite_of("test.test_os.X.test_y (n=2)") == "test_os"


def test_a_run_whose_failures_are_all_listed_passes_and_anything_else_fails() -> None:
    r = result()
    r.suites_failed = ["test_os"]
    listed = {"test.test_os.LinkTests.test_link": "Deliberately unsupported: hard links",
              "test.test_os.X.test_y (n=2)": "Errors: a name that is not UTF-8"}
    assert battery.judge(r, listed).ok
    v = battery.judge(r, {k: v for k, v in listed.items() if "Link" in k})
    assert not v.ok and list(v.unexpected) == ["test.test_os.X.test_y (n=2)"]
    assert "UNEXPECTED FAILURE test.test_os.X.test_y (n=2)" in v.report()
    v = battery.judge(r, {**listed, "test.test_glob.GlobTests.test_glob_literal": "x"})
    assert not v.ok and v.now_passing == ["test.test_glob.GlobTests.test_glob_literal"]
    # A listed test that did not run (skipped, or its suite not in this run) is no news.
    assert battery.judge(r, {**listed, "test.test_glob.GlobTests.test_escape_windows": "x",
                             "test.test_zipfile.T.test_t": "x"}).ok


def test_a_suite_that_failed_outside_every_test_fails_the_verdict() -> None:
    r = result()  # test_shutil failed by the summary and has no failing test in the XML
    listed = {t: "s" for t in r.failing()}
    v = battery.judge(r, listed)
    assert not v.ok and v.crashed == ["test_shutil"]
    assert "SUITE FAILED OUTSIDE ANY TEST test_shutil" in v.report()


def test_the_expectations_file_reads_and_refuses_an_entry_without_a_section(
        tmp_path: Path) -> None:
    assert all(isinstance(v, str) for v in battery.load_expected().values())
    bad = tmp_path / "e.toml"
    bad.write_text('[expected]\n"test.test_os.A.test_b" = ""\n')
    with pytest.raises(ValueError, match=r"test\.test_os\.A\.test_b"):
        battery.load_expected(bad)


def test_a_test_that_skips_itself_only_on_the_mount_needs_a_listed_reason() -> None:
    r = result()
    r.suites_failed = ["test_os"]
    listed = {t: "s" for t in r.failing()}
    r.outcomes["test.test_os.LinkTests.test_link2"] = "skipped"
    r.messages["test.test_os.LinkTests.test_link2"] = "os.link(): [Errno 1] Operation not permitted"
    base = battery.BatteryResult(outcomes={t: "passed" for t in r.outcomes})
    base.outcomes["test.test_glob.GlobTests.test_escape_windows"] = "skipped"  # skips on both
    v = battery.judge(r, listed, base, {})
    assert not v.ok and list(v.hidden) == ["test.test_os.LinkTests.test_link2"]
    assert "PASSES ON A LOCAL DISK test.test_os.LinkTests.test_link2" in v.report()
    assert battery.judge(r, listed, base, {"os.link(): [Errno 1]": "hard links"}).ok
    assert battery.judge(r, listed).ok  # no baseline: skips are not judged
