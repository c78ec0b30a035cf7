"""Secrets guard: recognise text that looks like a credential before a memory file stores it.

Owns the patterns and the refusal wording. `scan(text)` returns `Finding`s (kind, line, span) and
never the matched value; `refusal(display, findings)` is the message the handler returns, naming
each kind and line without echoing the secret. The handler calls `check()` only when constructed
with `secrets_guard=True` (off by default).

Patterns favour precision over recall: formats with a fixed, distinctive shape (PEM private key
blocks, AWS key ids, GitHub/Slack/Anthropic/Stripe/Google tokens, JWTs, credentials inside URLs)
and explicit assignments (`password=...`, `api_key: ...`, `aws_secret_access_key = ...`) whose
value looks like a secret: no spaces, long enough, not a placeholder (`<...>`, `${VAR}`, `****`,
`changeme`, values containing `example`/`redacted`/`your`). Prose that mentions passwords, or
code that reads them from the environment, is not refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    kind: str
    line: int  # 1-based line of the match's start
    start: int  # character offsets in the scanned text
    end: int


_PLACEHOLDER = re.compile(
    r"^(?:[<{\[$%]|\*{3,}|x{4,}|\.{3})|example|redacted|placeholder|changeme|your[_-]?|dummy|"
    r"^(?:none|null|nil|true|false|undefined|required|optional|secret|password|token)$",
    re.IGNORECASE,
)


def _not_placeholder(value: str) -> bool:
    return _PLACEHOLDER.search(value) is None and len(set(value)) > 3


def _password_like(value: str) -> bool:
    # A password assignment: 8+ characters, not only letters (a word is usually prose), no
    # call or attribute syntax (code reading it from somewhere else).
    return (len(value) >= 8 and not value.isalpha() and _not_placeholder(value)
            and not re.search(r"[()]|^os\.|^env\b|getenv|environ", value))


def _token_like(value: str) -> bool:
    # An API key/token/secret assignment: 16+ characters with both letters and digits.
    return (len(value) >= 16 and re.search(r"[A-Za-z]", value) is not None
            and re.search(r"\d", value) is not None and _not_placeholder(value)
            and not re.search(r"[()]|getenv|environ", value))


def _aws_secret_like(value: str) -> bool:
    return _not_placeholder(value) and re.search(r"\d", value) is not None


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    accept: Callable[[str], bool] | None = None


_ASSIGN = r"""\s*(?:[:=]|:=|=>)\s*(?P<q>["'`]?)(?P<v>[^\s"'`,;]+)(?P=q)"""

RULES: tuple[_Rule, ...] = (
    _Rule("private key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:\\n|\\r|\s)*(?:[A-Za-z-]+:[^\n]*(?:\\n|\s)+)*[A-Za-z0-9+/=]{40,}")),
    _Rule("AWS access key ID", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
          accept=_not_placeholder),
    _Rule("AWS secret access key", re.compile(
        r"(?i)\baws_?secret(?:_?access)?_?key[\"']?" + _ASSIGN),
          accept=_aws_secret_like),
    _Rule("GitHub token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b")),
    _Rule("GitHub token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{50,255}\b")),
    _Rule("Slack token", re.compile(r"\bxox[abposre]-[0-9]{5,}-[A-Za-z0-9-]{8,}")),
    _Rule("Slack token", re.compile(r"\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{16,}")),
    _Rule("Slack webhook URL", re.compile(
        r"https://hooks\.slack\.com/(?:services|workflows)/T[A-Z0-9]+/[A-Z0-9]+/[A-Za-z0-9]{16,}")),
    _Rule("Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    _Rule("Stripe secret key", re.compile(r"\b[sr]k_live_[A-Za-z0-9]{20,}")),
    _Rule("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    _Rule("JSON Web Token", re.compile(
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}")),
    _Rule("password in a URL", re.compile(
        r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<v>[^\s/@]+)@[^\s/@]+"),
          accept=lambda v: _not_placeholder(v) and len(v) >= 4),
    _Rule("password", re.compile(
        r"(?i)\b(?:\w*_)?(?:password|passwd|passphrase|pwd|pass)[\"']?" + _ASSIGN),
          accept=_password_like),
    _Rule("API key or token", re.compile(
        r"(?i)(?:\b(?:\w*_)?(?:api[_-]?key|apikey|secret[_-]?key|client[_-]?secret|"
        r"access[_-]?token|auth[_-]?token|bearer[_-]?token)|\b(?:token|secret))[\"']?"
        + _ASSIGN),
          accept=_token_like),
    _Rule("API key or token", re.compile(
        r"\b(?i:authorization)\s*:\s*(?i:bearer|token)\s+(?P<v>[A-Za-z0-9._~+/=-]{16,})"),
          accept=_token_like),
)


def scan(text: str, within: tuple[int, int] | None = None) -> list[Finding]:
    """Credential-looking spans of `text`, in order; `within` keeps those overlapping a range."""
    found: list[Finding] = []
    taken: list[tuple[int, int]] = []
    for rule in RULES:
        for m in rule.pattern.finditer(text):
            # The secret is the group named v where there is one (an assignment's value).
            value = m.group("v") if "v" in rule.pattern.groupindex else m.group(0)
            if rule.accept is not None and not rule.accept(value):
                continue
            start, end = m.span()
            if within is not None and not (start < within[1] and end > within[0]):
                continue
            if any(start < e and end > s for s, e in taken):
                continue  # one finding per span (a token inside `token=...` counts once)
            taken.append((start, end))
            found.append(Finding(rule.kind, text.count("\n", 0, start) + 1, start, end))
    found.sort(key=lambda f: f.start)
    return found


def _lines(findings: Iterable[Finding]) -> str:
    by_kind: dict[str, list[int]] = {}
    for f in findings:
        lines = by_kind.setdefault(f.kind, [])
        if f.line not in lines:
            lines.append(f.line)
    parts = []
    for kind, lines in by_kind.items():
        word = "line" if len(lines) == 1 else "lines"
        parts.append(f"{kind} on {word} {', '.join(map(str, lines))}")
    return "; ".join(parts)


def refusal(display: str, findings: Iterable[Finding]) -> str:
    """The message for Claude: what was refused and where, never the secret itself."""
    return (
        f"Refused to write {display}: the new content looks like it contains a credential "
        f"({_lines(findings)}). Nothing was written. Memory files must not hold secrets: "
        "record where the secret is kept (a secrets manager entry, an environment variable "
        "name) instead of its value."
    )
