"""``memfs mcp --transport http`` serves only who may use it (issue #30, item 2; docs/HANDLER.md
"MCP over HTTP: authentication"): a bearer token on TCP (made 0600, shown once), or a Unix
socket made 0600; ``--no-auth`` only on loopback. Another local user (nobody) gets nothing."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.handler.test_mcp import SERVER, free_port, server_env
from tests.mount.test_other_users import as_nobody

INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}})


@pytest.fixture
def memories() -> Iterator[Path]:
    """A root with a memory in it, in a directory nobody may enter (as a mount would be)."""
    path = Path(tempfile.mkdtemp(prefix="memfs-mcp-auth-"))
    (path / "root").mkdir()
    (path / "root" / "secret.md").write_text("alice's private memory\n")
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def curl(*argv: str, user: str = "root", auth: str | None = None) -> str:
    """The HTTP status of an MCP initialize (curl's exit code if it could not connect)."""
    cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
           "-H", "Content-Type: application/json",
           "-H", "Accept: application/json, text/event-stream", "--data", INIT, *argv]
    if auth:
        cmd[1:1] = ["-H", f"Authorization: Bearer {auth}"]
    out = as_nobody(*cmd) if user == "nobody" else subprocess.run(
        cmd, capture_output=True, text=True, timeout=30)
    return out.stdout if out.returncode == 0 else f"exit {out.returncode}"


def start(*argv: str) -> subprocess.Popen[str]:
    # The root is a local directory: said explicitly (--allow-local).
    return subprocess.Popen([*SERVER, "--transport", "http", "--allow-local", *argv],
                            env=server_env(),
                            stderr=subprocess.PIPE, text=True)


def wait_until(proc: subprocess.Popen[str], ready) -> None:
    for _ in range(300):
        if ready():
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.1)
    raise AssertionError("the HTTP server did not start")


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_tcp_needs_the_token_and_another_user_gets_nothing(memories: Path) -> None:
    port, token_file = free_port(), memories / "conf" / "mcp-token"
    proc = start("--root", str(memories / "root"), "--port", str(port),
                 "--token-file", str(token_file))
    try:
        wait_until(proc, lambda: port_open(port))
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        url = f"http://127.0.0.1:{port}/mcp"
        assert curl(url, user="nobody") == "401"
        assert curl(url, user="nobody", auth="guessed-token-guessed-token") == "401"
        assert curl(url, auth=token) == "200"
        stolen = as_nobody("cat", str(token_file))
        assert stolen.returncode != 0
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    # Made and named, but not printed: stderr is a pipe here, as the journal is under systemd.
    assert f"made a bearer token in {token_file} (0600; read it there" in err
    assert token not in err
    # Shown once: the next start reads it and does not print it.
    proc = start("--root", str(memories / "root"), "--port", str(port),
                 "--token-file", str(token_file))
    try:
        wait_until(proc, lambda: port_open(port))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert token not in err and f"bearer token in {token_file}" in err


def test_a_unix_socket_admits_only_its_user(memories: Path) -> None:
    os.chmod(memories, 0o755)  # nobody may reach the socket's directory: the socket decides
    sock = memories / "mcp.sock"
    proc = start("--root", str(memories / "root"), "--socket", str(sock))
    try:
        wait_until(proc, sock.exists)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert curl("--unix-socket", str(sock), "http://localhost/mcp") == "200"
        assert curl("--unix-socket", str(sock), "http://localhost/mcp",
                    user="nobody") == "exit 7"  # connect(): permission denied
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_no_auth_is_refused_off_loopback_and_a_shared_token_file_is_refused(
        memories: Path) -> None:
    out = subprocess.run([*SERVER, "--root", str(memories / "root"), "--allow-local",
                          "--transport", "http",
                          "--host", "0.0.0.0", "--no-auth"], env=server_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "refusing --no-auth on 0.0.0.0" in out.stderr
    shared = memories / "token"
    shared.write_text("a-token-others-can-read-0123456789\n")
    os.chmod(shared, 0o644)
    out = subprocess.run([*SERVER, "--root", str(memories / "root"), "--allow-local",
                          "--transport", "http",
                          "--port", str(free_port()), "--token-file", str(shared)],
                         env=server_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"refusing the token file {shared}" in out.stderr


def test_the_token_is_shown_once_on_a_terminal(tmp_path: Path, monkeypatch) -> None:
    """On a terminal (a person starting the server by hand) the new token is shown, once."""
    import argparse
    import io

    from memfs.memory import mcp_server

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    shown = Terminal()
    monkeypatch.setattr(mcp_server.sys, "stderr", shown)
    args = argparse.Namespace(no_auth=False, socket=None, host="127.0.0.1",
                              token_file=tmp_path / "conf" / "mcp-token")
    token = mcp_server._http_token(args)
    assert token is not None and f"(0600; shown this once): {token}" in shown.getvalue()
    again = Terminal()
    monkeypatch.setattr(mcp_server.sys, "stderr", again)
    assert mcp_server._http_token(args) == token and token not in again.getvalue()


def _returns_within(fn, seconds: float = 5.0) -> BaseException | object:
    """What ``fn()`` returned or raised, failing the test if it blocks (a FIFO's open would)."""
    import threading

    out: list[BaseException | object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # the test looks at it
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"blocked for {seconds} s"
    return out[0]


def test_a_fifo_planted_at_the_token_file_is_refused_at_once(tmp_path: Path) -> None:
    from memfs.memory.mcp_auth import AuthSetupError, load_or_create_token

    fifo = tmp_path / "mcp-token"
    os.mkfifo(fifo, 0o600)
    got = _returns_within(lambda: load_or_create_token(fifo))
    assert isinstance(got, AuthSetupError) and "refusing the token file" in str(got), got


@pytest.mark.parametrize(("mode", "refused"), [(0o777, True), (0o770, True), (0o1777, False),
                                               (0o755, False), (0o700, False)])
def test_a_socket_where_another_user_could_swap_it_is_refused(tmp_path: Path, mode: int,
                                                              refused: bool) -> None:
    from memfs.memory.mcp_auth import AuthSetupError, unix_socket

    where = tmp_path / "d"
    where.mkdir()
    os.chmod(where, mode)
    if refused:
        with pytest.raises(AuthSetupError, match="another user can replace entries"):
            unix_socket(where / "mcp.sock")
        assert not (where / "mcp.sock").exists()
    else:
        unix_socket(where / "mcp.sock").close()
        assert stat.S_IMODE((where / "mcp.sock").stat().st_mode) == 0o600


def test_a_fifo_planted_at_the_log_is_refused_at_once(tmp_path: Path) -> None:
    from memfs.private_dirs import open_log

    fifo = tmp_path / "mount.log"
    os.mkfifo(fifo, 0o600)
    got = _returns_within(lambda: open_log(fifo))
    assert isinstance(got, PermissionError) and "not a regular file" in str(got), got
    # A reader on the FIFO makes the open succeed: the check still refuses it.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        got = _returns_within(lambda: open_log(fifo))
        assert isinstance(got, PermissionError), got
    finally:
        os.close(reader)
    # A regular file of this user's opens as before, blocking writes and all.
    fd = open_log(tmp_path / "real.log")
    try:
        assert os.get_blocking(fd) and os.write(fd, b"line\n") == 5
    finally:
        os.close(fd)
