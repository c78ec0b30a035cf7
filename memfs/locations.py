"""Where memfs's data lives, as a user names it: the bucket, the key prefix, the endpoint URL,
and the cache directory's default — checked and spelled alike by every program that takes them
(``memfs mount``, the operator commands, ``memfs doctor``). A neutral module: the programs import
it, it imports none of them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


class ConfigError(ValueError):
    """A setting that cannot work; ``str()`` is the one line shown to the user."""


def normalize_prefix(prefix: str) -> str:
    """``"p"``, ``"/p/"`` and ``"p//"`` all mean the key prefix ``"p/"``; ``""`` is the root."""
    parts = [p for p in prefix.split("/") if p]
    for p in parts:
        if p in (".", ".."):
            raise ConfigError(f"--prefix {prefix!r}: '.' and '..' are not allowed in a prefix")
    return "".join(p + "/" for p in parts)


#: What boto3 accepts as a bucket name (AWS itself is stricter: 3-63 lowercase characters; an
#: S3-compatible server may allow more, so memfs refuses only what no request could carry).
BUCKET_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")
ENDPOINT_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")


def check_bucket(bucket: str) -> None:
    """Refuse a bucket name no S3 request can carry, before boto3 answers with a long regex."""
    if not BUCKET_NAME.fullmatch(bucket):
        raise ConfigError(f"--bucket {bucket!r} is not a bucket name: use letters, digits, "
                          "'.', '-' and '_' (no spaces, slashes or other characters)")


def check_endpoint_url(url: str) -> None:
    """An endpoint is an http(s) URL; ``127.0.0.1:9000`` alone makes botocore raise a
    ``ValueError`` deep inside client creation."""
    if not ENDPOINT_URL.fullmatch(url):
        hint = f": did you mean http://{url}?" if "://" not in url else ""
        raise ConfigError(f"--endpoint-url {url!r} is not an http:// or https:// URL{hint}")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memfs``, else ``~/.cache/memfs`` (where ``--cache-dir`` defaults to)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "memfs"
