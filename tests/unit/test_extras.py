"""Every optional import fails with the ``pip install 'memfs-s3[extra]'`` line (issue #31 item
7), never a bare ``ModuleNotFoundError``; a missing module no extra provides stays a real error.
The installed wheel shows the same (tests/system/test_wheel.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memfs.extras import MissingExtra, missing_extra


def without(modules: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where importing `modules` fails as if not installed."""
    block = "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run([sys.executable, "-c", f"import sys\n{block}{code}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("code", "what"), [
    ("from memfs.handler import MemoryTool", "memfs.memory.MemoryTool"),
    ("from memfs.memory import MemoryTool", "memfs.memory.MemoryTool"),
    ("from memfs.memory import AsyncMemoryTool", "memfs.memory.AsyncMemoryTool"),
    ("from memfs.memory.async_tool import AsyncMemoryTool", "memfs.memory.AsyncMemoryTool"),
])
def test_sdk_tools_without_anthropic_say_which_extra(code: str, what: str) -> None:
    r = without(["anthropic"], code)
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] == (
        f"memfs.extras.MissingExtra: {what} needs the anthropic package, which is not "
        "installed: pip install 'memfs-s3[anthropic]'")


def test_the_handler_needs_no_extra() -> None:
    r = without(["anthropic", "mcp", "moto"], "from memfs.memory import MemoryHandler")
    assert r.returncode == 0, r.stderr


def test_demo_without_moto_or_anthropic_is_one_line() -> None:
    cli = "from memfs.cli import main; raise SystemExit(main(['demo']))"
    r = without(["moto"], cli)
    assert (r.returncode, r.stderr) == (1, "memfs demo without --bucket (its embedded S3 "
                                        "server) needs the moto package, which is not "
                                        "installed: pip install 'memfs-s3[demo]'\n")
    r = without(["anthropic"], cli)
    assert (r.returncode, r.stderr) == (1, "memfs demo needs the anthropic package, "
                                        "which is not installed: pip install "
                                        "'memfs-s3[anthropic]'\n")


def test_mcp_without_its_extra_is_one_line() -> None:
    r = without(["mcp"], "from memfs.cli import main; raise SystemExit(main(['mcp', '--root', "
                "'/tmp', '--allow-local']))")
    assert (r.returncode, r.stderr) == (1, "memfs mcp: the MCP SDK is not installed; install "
                                        "it with: pip install 'memfs-s3[mcp]'\n")


def test_an_unknown_missing_module_is_left_alone() -> None:
    exc = ModuleNotFoundError("No module named 'frobnicate'", name="frobnicate")
    assert missing_extra(exc, "x") is exc
    wrapped = missing_extra(ModuleNotFoundError(name="anthropic.lib"), "x")
    assert isinstance(wrapped, MissingExtra) and isinstance(wrapped, ImportError)
