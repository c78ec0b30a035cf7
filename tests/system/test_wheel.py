"""The wheel an operator installs: runtime code only, and everything works outside the checkout.

Builds the wheel from this checkout, installs it (with its dependencies) into a fresh virtualenv
in a temporary directory, and runs the installed ``memfs`` from a directory that is not the
checkout: ``--version``, ``install-unit`` (the unit files come from the wheel's data, not from
``systemd/``), and a clear line for a command whose optional extra is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import BUCKET

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]


def run(*args: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                         timeout=600)
    if check:
        assert out.returncode == 0, f"{args}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, REPO, cwd=out)
    (whl,) = out.glob("*.whl")
    return whl


def test_the_wheel_holds_runtime_code_and_the_units(wheel: Path) -> None:
    assert wheel.name == f"memfs_s3-{VERSION}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"memfs", f"memfs_s3-{VERSION}.dist-info", f"memfs_s3-{VERSION}.data"}
    assert not [n for n in names if "/tests/" in n or n.startswith(("tests/", "bench/"))]
    assert f"memfs_s3-{VERSION}.dist-info/licenses/LICENSE" in names
    assert "memfs/py.typed" in names
    assert {"memfs/completion/memfs.bash", "memfs/completion/_memfs"} <= set(names)
    assert f"memfs_s3-{VERSION}.data/data/share/man/man1/memfs.1" in names
    units = {n.rsplit("/", 1)[1] for n in names if "/share/memfs-s3/systemd/" in n}
    assert units == {p.name for p in (REPO / "systemd").iterdir()}
    meta = zipfile.ZipFile(wheel).read(f"memfs_s3-{VERSION}.dist-info/METADATA").decode()
    assert "License-Expression: MIT" in meta and "Name: memfs-s3" in meta


def test_installed_into_a_fresh_venv_it_works_outside_the_checkout(wheel: Path, tmp_path: Path,
                                                                   s3, s3_reset: str) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    run(venv / "bin" / "pip", "install", "-q", wheel, cwd=tmp_path)
    memfs = venv / "bin" / "memfs"
    assert run(memfs, "--version", cwd=tmp_path).stdout == f"memfs {VERSION}\n"
    run(memfs, "install-unit", "--instance", "work", "--bucket", "my-bucket", "--mountpoint",
        "/memories", "--unit-dir", tmp_path / "units", "--env-dir", tmp_path / "env",
        "--no-reload", cwd=tmp_path)
    unit = (tmp_path / "units" / "memfs@.service").read_text()
    assert f"ExecStart={memfs} " in unit
    assert "MEMFS_BUCKET=my-bucket" in (tmp_path / "env" / "work.env").read_text()
    out = run(memfs, "mcp", "--root", tmp_path, cwd=tmp_path, check=False)
    assert out.returncode == 1
    assert out.stderr == ("memfs mcp: the MCP SDK is not installed; install it with: "
                          "pip install 'memfs-s3[mcp]'\n")
    assert (venv / "share/man/man1/memfs.1").read_text().startswith('.TH MEMFS "1"')
    assert "complete -o bashdefault -F _shtab_memfs memfs" in run(
        memfs, "completion", "bash", cwd=tmp_path).stdout

    # The operator's round trip, all from the installed command: mount, status, df, umount.
    mp = tmp_path / "mp"
    mp.mkdir()
    run(memfs, "mount", f"{BUCKET}:/ops", mp, "--endpoint-url", s3_reset, "--cache-dir",
        tmp_path / "cache", cwd=tmp_path)
    try:
        (mp / "a.md").write_text("from the wheel\n")
        status = json.loads(run(memfs, "status", "--json", mp, cwd=tmp_path).stdout)
        assert [m["mountpoint"] for m in status] == [str(mp)]
        # a.md; the mount's endpoint probe is counted apart.
        assert status[0]["s3"]["requests"]["PutObject"] == {"ok": 1}
        assert status[0]["s3"]["probe"] > 0
        assert "bytes: 15 bytes (no limit)" in run(memfs, "df", mp, cwd=tmp_path).stdout
    finally:
        run(memfs, "umount", mp, cwd=tmp_path)
    assert s3.get_object(Bucket=BUCKET, Key="ops/a.md")["Body"].read() == b"from the wheel\n"


def test_scripts_install_puts_memfs_its_man_page_and_units_in_place(wheel: Path,
                                                                    tmp_path: Path) -> None:
    """The documented install (README, DEPLOY): scripts/install from a built wheel, every place
    given, run from outside the checkout; then what an operator without extras sees."""
    places = {"--prefix": tmp_path / "opt", "--bin-dir": tmp_path / "bin",
              "--man-dir": tmp_path / "man" / "man1", "--unit-dir": tmp_path / "units",
              "--completion-dir": tmp_path / "completion"}
    out = run(REPO / "scripts" / "install", "--from", wheel, "--no-apt",
              *[str(x) for kv in places.items() for x in kv], cwd=tmp_path)
    assert f"installed memfs {VERSION} in {tmp_path / 'opt'}" in out.stdout
    memfs = tmp_path / "bin" / "memfs"
    assert memfs.resolve() == (tmp_path / "opt" / "bin" / "memfs").resolve()
    assert run(memfs, "--version", cwd=tmp_path).stdout == f"memfs {VERSION}\n"
    man = subprocess.run(["man", "-w", "memfs"], capture_output=True, text=True,
                         env={"MANPATH": str(tmp_path / "man"), "PATH": "/usr/bin:/bin"})
    assert man.stdout.strip() == str(tmp_path / "man" / "man1" / "memfs.1"), man.stderr
    unit = (tmp_path / "units" / "memfs@.service").read_text()
    assert f"ExecStart={tmp_path / 'opt' / 'bin' / 'memfs'} mount" in unit
    assert "_shtab_memfs" in (tmp_path / "completion" / "memfs").read_text()
    # Again: an upgrade in place, not an error.
    run(REPO / "scripts" / "install", "--from", wheel, "--no-apt",
        *[str(x) for kv in places.items() for x in kv], cwd=tmp_path)

    # Without extras: one line with the pip install command, never a traceback.
    python = tmp_path / "opt" / "bin" / "python"
    for code, extra in (("from memfs.memory import MemoryTool", "anthropic"),
                        ("from memfs.memory.async_tool import AsyncMemoryTool", "anthropic")):
        r = run(python, "-c", code, cwd=tmp_path, check=False)
        assert r.returncode == 1
        assert r.stderr.splitlines()[-1].endswith(f"pip install 'memfs-s3[{extra}]'"), r.stderr
    r = run(memfs, "demo", cwd=tmp_path, check=False)
    assert (r.returncode, r.stderr) == (1, "memfs demo needs the anthropic package, which is "
                                        "not installed: pip install 'memfs-s3[anthropic]'\n")
    r = run(memfs, "handle", "--root", tmp_path, cwd=tmp_path, check=False)
    assert r.returncode == 2 and "is not on a memfs mount" in r.stderr
