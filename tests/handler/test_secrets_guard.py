"""The secrets guard: credential-looking content is refused (kind + line, never the value), ordinary
notes are not, and nothing is written when it refuses. Off by default.

Test credentials are assembled at run time from pieces, so this file itself holds no string a
secret scanner would flag.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from memfs.memory import CommandError, MemoryHandler, secrets_guard, serve_jsonl
from tests.conftest import memfs_cmd


def j(*parts: str) -> str:
    return "".join(parts)


B64 = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
AWS_ID = j("AKIA", "Z7QWERTYUIOP2345")
AWS_TMP_ID = j("ASIA", "Z7QWERTYUIOP2345")
AWS_SECRET = j("q8Fz3/Kd0Lm", "Xp2Rt7Vw9Yb4Nc6Hj1Gs5Ae8Ui0")
GH = j("ghp_", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
GH_PAT = j("github_pat_", "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU")
SLACK = j("xoxb-", "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx")
ANT = j("sk-ant-", "api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe")
JWT = j("eyJhbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", ".",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")

SECRETS = [
    (j("-----BEGIN RSA ", "PRIVATE KEY-----\n", B64, "\n", B64, "\n-----END RSA PRIVATE KEY-----"),
     "private key"),
    (j("-----BEGIN OPENSSH ", "PRIVATE KEY-----\n", B64, "\n-----END OPENSSH PRIVATE KEY-----"),
     "private key"),
    (j('{"private_key": "-----BEGIN ', 'PRIVATE KEY-----\\n', B64, '\\n"}'), "private key"),
    (f"aws_access_key_id = {AWS_ID}", "AWS access key ID"),
    (f"temporary creds {AWS_TMP_ID}", "AWS access key ID"),
    (f"aws_secret_access_key = {AWS_SECRET}", "AWS secret access key"),
    (f"export AWS_SECRET_ACCESS_KEY='{AWS_SECRET}'", "AWS secret access key"),
    (f"token: {GH}", "GitHub token"),
    (f"use {GH_PAT} for the CI", "GitHub token"),
    (f"SLACK_BOT_TOKEN={SLACK}", "Slack token"),
    (j("https://hooks.slack.com/services/", "T0123ABCD/B0123ABCD/", "a1b2c3d4e5f6g7h8i9j0k1l2"),
     "Slack webhook URL"),
    (f"ANTHROPIC_API_KEY={ANT}", "Anthropic API key"),
    (j("stripe: ", "sk_live_", "4eC39HqLyjWDarjtT1zdp7dc"), "Stripe secret key"),
    (j("maps key ", "AIza", "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"), "Google API key"),
    (f"Authorization: Bearer {JWT}", "JSON Web Token"),
    (j("DATABASE_URL=postgres://app:", "Wq8r!zP2x", "@db.internal:5432/app"),
     "password in a URL"),
    (j("password=", "hunter2hunter2"), "password"),
    (j('db_password: "', "S3cure-Pa55", '"'), "password"),
    (j("PASSWD = ", "'x9!mK2#qL'"), "password"),
    (j("api_key: ", "9f8e7d6c5b4a39281716"), "API key or token"),
    (j("client_secret=", "Zq12Wx34Ec56Rv78Tb90"), "API key or token"),
]

HARMLESS = [
    "The user's password policy requires 12 characters.",
    "password: required",
    "password = os.environ['DB_PASSWORD']",
    "password=<your password here>",
    "password: ${DB_PASSWORD}",
    "password: ********",
    "Password: changeme123 is the documented default placeholder",
    "token = tokenizer.encode(text)",
    "max_tokens=1024",
    "api_key: YOUR_API_KEY_HERE",
    "Use AWS docs example AKIAIOSFODNN7EXAMPLE for illustration",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "-----BEGIN PUBLIC KEY-----\n" + B64 + "\n-----END PUBLIC KEY-----",
    "We talked about -----BEGIN PRIVATE KEY----- headers in PEM files.",
    "git commit a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0 fixed it",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "https://user@example.com/path and http://localhost:8080/x",
    "The secret to good coffee: fresh beans.",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "ghp_ prefixes mark GitHub tokens; sk-ant- marks Anthropic keys",
]


@pytest.mark.parametrize(("text", "kind"), SECRETS, ids=[k for _, k in SECRETS])
def test_each_credential_kind_is_found(text: str, kind: str) -> None:
    found = secrets_guard.scan("first line\n" + text)
    assert [f.kind for f in found] == [kind]
    assert found[0].line == 2


@pytest.mark.parametrize("text", HARMLESS)
def test_ordinary_notes_pass(text: str) -> None:
    assert secrets_guard.scan(text) == []


def test_refusal_names_kinds_and_lines_never_the_value(tmp_path: Path) -> None:
    h = MemoryHandler(tmp_path, secrets_guard=True)
    text = f"# creds\nid {AWS_ID}\nok\n{GH}\nand {AWS_ID.replace('Z7', 'Z8')}\n"
    with pytest.raises(CommandError) as exc:
        h.run({"command": "create", "path": "/memories/sub/creds.md", "file_text": text})
    msg = str(exc.value)
    assert msg == (
        "Refused to write /memories/sub/creds.md: the new content looks like it contains a "
        "credential (AWS access key ID on lines 2, 5; GitHub token on line 4). Nothing was "
        "written. Memory files must not hold secrets: record where the secret is kept (a secrets "
        "manager entry, an environment variable name) instead of its value.")
    for secret in (AWS_ID, GH, GH[4:], AWS_ID[4:]):
        assert secret not in msg
    assert list(tmp_path.iterdir()) == []  # not even the parent directory


def test_str_replace_and_insert_are_checked_on_what_they_add(tmp_path: Path) -> None:
    # A file written before the guard was on may hold something; edits elsewhere still work.
    (tmp_path / "n.md").write_text(f"old {GH}\nline two\n")
    h = MemoryHandler(tmp_path, secrets_guard=True)
    h.run({"command": "str_replace", "path": "/memories/n.md", "old_str": "two",
           "new_str": "2"})
    h.run({"command": "insert", "path": "/memories/n.md", "insert_line": 2,
           "insert_text": "three"})
    before = (tmp_path / "n.md").read_text()
    with pytest.raises(CommandError, match=r"\(Anthropic API key on line 2\)"):
        h.run({"command": "str_replace", "path": "/memories/n.md", "old_str": "line 2",
               "new_str": f"key {ANT}"})
    with pytest.raises(CommandError, match=r"\(password on line 4\)"):
        h.run({"command": "insert", "path": "/memories/n.md", "insert_line": 3,
               "insert_text": j("password=", "p4ss-w0rd!")})
    # A secret completed across the edit boundary counts too.
    (tmp_path / "k.md").write_text(f"{AWS_ID[:10]}XXXXXXXXXX\n")
    with pytest.raises(CommandError, match="AWS access key ID on line 1"):
        h.run({"command": "str_replace", "path": "/memories/k.md", "old_str": "XXXXXXXXXX",
               "new_str": AWS_ID[10:]})
    assert (tmp_path / "n.md").read_text() == before


def test_off_by_default(tmp_path: Path) -> None:
    h = MemoryHandler(tmp_path)
    assert h.run({"command": "create", "path": "/memories/a.md", "file_text": GH}) == \
        "File created successfully at: /memories/a.md"


def test_memory_tool_passes_the_flag(tmp_path: Path) -> None:
    from anthropic.lib.tools import ToolError

    from memfs.memory.sdk import MemoryTool

    tool = MemoryTool(tmp_path, secrets_guard=True, allow_local=True)
    with pytest.raises(ToolError, match="Slack token on line 1"):
        tool.call({"command": "create", "path": "/memories/a.md", "file_text": SLACK})
    assert not (tmp_path / "a.md").exists()


def test_serve_jsonl_with_the_guard(tmp_path: Path) -> None:
    line = json.dumps({"command": "create", "path": "/memories/a.md", "file_text": GH})
    out = io.StringIO()
    assert serve_jsonl(tmp_path, io.StringIO(line + "\n"), out, secrets_guard=True) == 0
    result = json.loads(out.getvalue())
    assert result["is_error"] and "GitHub token on line 1" in result["content"]
    assert GH not in out.getvalue()


def test_memfs_handle_secrets_guard_flag(tmp_path: Path) -> None:
    """`memfs handle --secrets-guard` (needs memfs/cli.py to pass the flag on)."""
    line = json.dumps({"command": "create", "path": "/memories/a.md", "file_text": GH})
    result = subprocess.run([*memfs_cmd(), "handle", "--root", str(tmp_path), "--secrets-guard",
                             "--allow-local"],
                            input=line + "\n", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["is_error"]
    assert not (tmp_path / "a.md").exists()
