"""Operator tools as libraries: no argument parsing, no printing (``memfs.cli`` does both).

* ``locate`` — which bucket, prefix and endpoint a path or the settings name (a ``Target``);
* ``history`` — a file's versions, restoring one, and the log of changes under a prefix;
* ``gc`` — expiry policies and the run that applies them;
* ``install`` — the systemd units and an instance's env file;
* ``errors`` — ``OpError`` (every failure here; ``usage`` marks a mistake in what was asked) and
  the one-line wording of S3 failures.
"""
