"""The systemd unit, its installer, and the notify protocol of ``memfs mount --foreground``.

These run on the host without systemd as PID 1: ``systemd-analyze verify`` on the installed unit,
and an AF_UNIX datagram socket standing in for systemd's ``NOTIFY_SOCKET``. The tests with a real
systemd are in ``test_systemd_container.py``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from memfs.cli import install as install_cli
from memfs.ops import install
from tests.conftest import BUCKET, is_mounted
from tests.support.systemd_helpers import REPO, NotifyListener, mount_entries, verify_env

UNIT = REPO / "systemd" / "memfs@.service"
ENV_EXAMPLE = REPO / "systemd" / "memfs.env.example"

# Directives that give a service its own mount namespace: the FUSE mount would be made inside it
# and be invisible everywhere else (shown for real by test_systemd_container.py).
NAMESPACE_DIRECTIVES = (
    "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts",
    "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
    "ProtectProc", "ProcSubset", "ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths",
    "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths", "MountFlags", "RootDirectory",
    "RootImage", "DynamicUser", "MountAPIVFS", "PrivateUsers",
)


def unit_settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


# --- the unit file ---------------------------------------------------------------------------


def test_unit_has_the_contracted_settings() -> None:
    s = unit_settings(UNIT.read_text())
    assert s["Type"] == ["notify"]
    assert s["NotifyAccess"] == ["main"]
    assert s["EnvironmentFile"] == ["/etc/memfs/%i.env"]
    assert s["Restart"] == ["on-failure"]
    assert s["ExecStart"] == [f"{install.TEMPLATE_BINARY} mount --foreground ${{MEMFS_MOUNTPOINT}}"]
    assert s["ExecStopPost"] == [f"-{install.TEMPLATE_BINARY} umount --lazy ${{MEMFS_MOUNTPOINT}}"]
    assert s["Documentation"] == ["man:memfs(1)"]
    assert s["DeviceAllow"] == ["/dev/fuse rw"]
    assert s["StandardOutput"] == ["journal"]
    assert s["StandardError"] == ["journal"]
    assert s["NoNewPrivileges"] == ["yes"]


def test_unit_creates_no_private_mount_namespace() -> None:
    s = unit_settings(UNIT.read_text())
    bad = sorted(set(s) & set(NAMESPACE_DIRECTIVES))
    assert not bad, f"{bad} would hide the FUSE mount in a private mount namespace"


def test_installed_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    written = install.install_unit(unit_dir=unit_dir, reload=False)
    assert written == [unit_dir / "memfs@.service", unit_dir / "memfs-gc@.service",
                       unit_dir / "memfs-gc@.timer"]
    for template in ("memfs@", "memfs-gc@"):
        text = (unit_dir / f"{template}.service").read_text()
        exec_start = unit_settings(text)["ExecStart"][0]
        binary = exec_start.split()[0]
        assert Path(binary).is_absolute() and os.access(binary, os.X_OK), exec_start
        # verify needs an instance; a copy named NAME@test.service is the template instantiated.
        instance = unit_dir / f"{template}test.service"
        instance.write_text(text)
        result = subprocess.run(["systemd-analyze", "verify", str(instance)],
                                capture_output=True, text=True, cwd=unit_dir,
                                env=verify_env(tmp_path))
        # Parse problems ("Unknown key", "not executable") go to stderr with exit status 0.
        assert result.stderr == "", result.stderr
        assert result.returncode == 0, result.stdout


def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    """Guards the test above: verify really reports problems on stderr here."""
    bad = tmp_path / "memfs@test.service"
    bad.write_text(install.render_unit([sys.executable, "-m", "memfs"]) + "\n[Service]\nBogus=1\n")
    result = subprocess.run(["systemd-analyze", "verify", str(bad)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert "Bogus" in result.stderr


def test_env_example_documents_every_mount_flag() -> None:
    from memfs.cli import build_parser

    parser = build_parser()
    mount = next(a for a in parser._subparsers._group_actions[0].choices.items()
                 if a[0] == "mount")[1]
    flags = {"MOUNTPOINT"}
    for action in mount._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt != "--help":
                flags.add(opt[2:].upper().replace("-", "_"))
    text = ENV_EXAMPLE.read_text()
    documented = set(re.findall(r"^#?MEMFS_([A-Z0-9_]+)=", text, re.M))
    assert flags - documented == set(), f"undocumented in memfs.env.example: {flags - documented}"
    assert documented - flags == set(), f"documented but no such flag: {documented - flags}"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        assert re.search(rf"^#?{key}=", text, re.M), key


# --- the installer ---------------------------------------------------------------------------


def test_installer_writes_unit_and_private_env_file(tmp_path: Path) -> None:
    rc = install_cli.main([
        "--instance", "work", "--bucket", "my-bucket", "--mountpoint", "/memories",
        "--prefix", "agents/a b/", "--set", "AWS_PROFILE=memfs",
        "--unit-dir", str(tmp_path / "u"), "--env-dir", str(tmp_path / "e"), "--no-reload"])
    assert rc == 0
    env = tmp_path / "e" / "work.env"
    assert env.stat().st_mode & 0o777 == 0o600
    values = dict(line.split("=", 1) for line in env.read_text().splitlines()
                  if line and not line.startswith("#"))
    assert values == {"MEMFS_MOUNTPOINT": "/memories", "MEMFS_BUCKET": "my-bucket",
                      "MEMFS_PREFIX": '"agents/a b/"', "AWS_PROFILE": "memfs"}
    # systemd would read the quoted value as one word: check with the shell's equivalent rules.
    out = subprocess.run(["sh", "-c", f"set -a; . {env}; printf %s \"$MEMFS_PREFIX\""],
                         capture_output=True, text=True, check=True).stdout
    assert out == "agents/a b/"
    assert (tmp_path / "u" / "memfs@.service").stat().st_mode & 0o777 == 0o644


def test_installer_honours_every_directory_it_is_given(tmp_path: Path) -> None:
    """--env-dir D writes D/NAME.env and the units read it from D; --unit-dir holds the units;
    every memfs command in them (ExecStart, ExecStopPost) is the installer's memfs."""
    env_dir = tmp_path / "etc" / "memfs-here"
    assert install_cli.main([
        "--instance", "alice", "--bucket", "b", "--mountpoint", "/m", "--unit-dir",
        str(tmp_path / "u"), "--env-dir", str(env_dir), "--memfs-bin", "/opt/m/bin/memfs",
        "--no-reload"]) == 0
    assert (env_dir / "alice.env").is_file()
    for name in ("memfs@.service", "memfs-gc@.service"):
        s = unit_settings((tmp_path / "u" / name).read_text())
        assert s["EnvironmentFile"] == [f"{env_dir}/%i.env"], name
        for key in ("ExecStart", "ExecStopPost"):
            for line in s.get(key, []):
                assert line.lstrip("-").startswith("/opt/m/bin/memfs "), (name, line)
                assert install.TEMPLATE_BINARY not in line


def test_unit_comments_name_what_exists() -> None:
    """The comments' modules and test files exist; Documentation= is memfs's own man page."""
    for unit in sorted((REPO / "systemd").iterdir()):
        text = unit.read_text()
        for path in re.findall(r"\b((?:memfs|tests|systemd|docs)/[\w/.*@-]+\.(?:py|md|service))",
                               text):
            assert list(REPO.glob(path)), f"{unit.name} names {path}, which does not exist"
        for module in re.findall(r"python -m ([\w.]+)", text):
            assert importlib.util.find_spec(module), f"{unit.name} names module {module}"
        for doc in re.findall(r"^Documentation=(.*)$", text, re.M):
            assert doc == "man:memfs(1)", (unit.name, doc)


def test_installer_keeps_an_existing_env_file(tmp_path: Path, capsys) -> None:
    args = ["--instance", "x", "--bucket", "b1", "--mountpoint", "/m",
            "--unit-dir", str(tmp_path), "--env-dir", str(tmp_path), "--no-reload"]
    assert install_cli.main(args) == 0
    before = (tmp_path / "x.env").read_text()
    assert install_cli.main([*args[:3], "b2", *args[4:]]) == 1
    assert "exists" in capsys.readouterr().err
    assert (tmp_path / "x.env").read_text() == before
    assert install_cli.main([*args[:3], "b2", *args[4:], "--force"]) == 0
    assert "MEMFS_BUCKET=b2" in (tmp_path / "x.env").read_text()
    # Re-installing only the unit (no settings) leaves the env file alone and succeeds.
    assert install_cli.main(["--instance", "x", "--unit-dir", str(tmp_path), "--env-dir",
                         str(tmp_path), "--no-reload"]) == 0


def test_installer_refuses_missing_required_settings(tmp_path: Path, capsys) -> None:
    rc = install_cli.main(["--instance", "x", "--bucket", "b", "--unit-dir", str(tmp_path),
                       "--env-dir", str(tmp_path), "--no-reload"])
    assert rc == 1
    assert "MEMFS_MOUNTPOINT" in capsys.readouterr().err
    assert not (tmp_path / "x.env").exists()


def test_installer_uses_an_explicit_binary(tmp_path: Path) -> None:
    install.install_unit(unit_dir=tmp_path, exec_cmd=["/opt/memfs venv/bin/memfs"], reload=False)
    text = (tmp_path / "memfs@.service").read_text()
    assert 'ExecStart="/opt/memfs venv/bin/memfs" mount --foreground ${MEMFS_MOUNTPOINT}' in text


# --- the notify protocol ---------------------------------------------------------------------


def _mount_state(mnt: Path) -> dict[str, object]:
    """What the listener records at the instant READY=1 arrives."""
    fstypes = [t for m, t in mount_entries() if m == str(mnt)]
    return {"fstypes": fstypes, "listing": sorted(os.listdir(mnt))}


def _start(mnt: Path, endpoint: str, notify_socket: str, bucket: str = BUCKET,
           log: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "NOTIFY_SOCKET": notify_socket}
    return subprocess.Popen(
        [sys.executable, "-m", "memfs", "mount", str(mnt), "--bucket", bucket,
         "--endpoint-url", endpoint, "--foreground"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)



@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_ready_only_once_the_mount_answers_then_stopping_on_sigterm(
        kind: str, s3, s3_reset: str, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="seed.md", Body=b"remembered")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    address = str(tmp_path / "notify.sock") if kind == "path" else f"@memfs-{uuid.uuid4().hex}"
    with NotifyListener(address, on_ready=lambda: _mount_state(mnt)) as listener:
        proc = _start(mnt, s3_reset, address)
        try:
            ready = listener.wait_for("READY", proc=proc)
            # At the instant READY arrived the mount was live and served a listing from S3.
            assert ready.checks == {"fstypes": ["fuse.memfs"], "listing": ["seed.md"]}
            # NotifyAccess=main: systemd only accepts it from the main process itself.
            assert ready.pid == proc.pid
            assert listener.find("STOPPING") is None
            (mnt / "note.md").write_text("written before SIGTERM\n")
            proc.send_signal(signal.SIGTERM)
            stopping = listener.wait_for("STOPPING", timeout=30)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    assert proc.returncode == 0, out
    assert stopping.pid == proc.pid
    assert ready.at < stopping.at
    assert not is_mounted(mnt)
    body = s3.get_object(Bucket=BUCKET, Key="note.md")["Body"].read()
    assert body == b"written before SIGTERM\n"



def test_failed_mount_exits_nonzero_without_ready(s3, s3_reset: str, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with NotifyListener(tmp_path / "notify.sock") as listener:
        proc = _start(mnt, s3_reset, str(tmp_path / "notify.sock"), bucket="no-such-bucket")
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode != 0
    assert "no-such-bucket" in out
    assert listener.find("READY") is None, [m.fields for m in listener.messages]
    assert not is_mounted(mnt)
