"""``--events`` specs: what is read from them, where the AMQP password comes from (never the
command line), and the precise refusal of nonsense."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memfs.events.feeds import PASSWORD_ENV, PASSWORD_FILE_ENV, parse_amqp, parse_sqs
from memfs.locations import ConfigError

URL = "amqp://memfs@rabbit.example:5673/fleet?exchange=memfs-events"


def test_amqp_spec_with_the_password_from_the_environment() -> None:
    s = parse_amqp(URL, {PASSWORD_ENV: "s3cret"})
    assert (s.host, s.port, s.vhost, s.user, s.password, s.exchange, s.tls) == (
        "rabbit.example", 5673, "fleet", "memfs", "s3cret", "memfs-events", False)
    assert "s3cret" not in repr(s) and "s3cret" not in s.describe()


def test_amqp_defaults() -> None:
    s = parse_amqp("amqps://h/?exchange=x", {})
    assert (s.port, s.vhost, s.user, s.password, s.tls) == (5671, "/", "guest", "guest", True)
    assert parse_amqp("amqp://h/%2F?exchange=x", {}).vhost == "/"
    assert parse_amqp("amqp://h?exchange=x", {}).port == 5672


def _secret(tmp_path: Path, mode: int, text: str = "from-file\n") -> Path:
    path = tmp_path / "password"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_password_file_only_its_owner_reads(tmp_path: Path) -> None:
    path = _secret(tmp_path, 0o600)
    assert parse_amqp(f"{URL}&password_file={path}", {PASSWORD_ENV: "env"}).password == \
        "from-file"
    assert parse_amqp(URL, {PASSWORD_FILE_ENV: str(path)}).password == "from-file"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_password_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = _secret(tmp_path, mode)
    with pytest.raises(ConfigError, match=rf"readable by others .*chmod 600 {path}"):
        parse_amqp(f"{URL}&password_file={path}", {})


def test_password_file_faults(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the password file .*No such file"):
        parse_amqp(f"{URL}&password_file={tmp_path}/nope", {})
    with pytest.raises(ConfigError, match="is empty"):
        parse_amqp(f"{URL}&password_file={_secret(tmp_path, 0o600, '  ')}", {})
    link = tmp_path / "link"
    os.symlink(_secret(tmp_path, 0o600), link)
    with pytest.raises(ConfigError, match="cannot read the password file"):
        parse_amqp(f"{URL}&password_file={link}", {})


@pytest.mark.parametrize(("spec", "words"), [
    ("amqp://u:pw@h/?exchange=x", "process list"),
    ("amqp://h/", "name the exchange"),
    ("amqp://h/?exchange=", "name the exchange"),
    ("amqp:///?exchange=x", "no broker host"),
    ("amqp://h:99999/?exchange=x", "out of range"),
    ("amqp://h/?exchange=x&exchange=y", "given twice"),
    ("amqp://h/?exchange=x&durable=1", "unknown parameter 'durable'"),
    ("amqp://h/?exchange=x&heartbeat=0", "heartbeat"),
    ("amqp://memfs@h/?exchange=x", "no password for the AMQP user 'memfs'"),
])
def test_amqp_nonsense(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_amqp(spec, {})


def test_sqs_spec() -> None:
    s = parse_sqs("sqs:https://sqs.eu-west-1.amazonaws.com/1/q?topic=arn:aws:sns:eu-west-1:1:t")
    assert (s.queue_url, s.topic_arn, s.wait_seconds) == (
        "https://sqs.eu-west-1.amazonaws.com/1/q", "arn:aws:sns:eu-west-1:1:t", 20)
