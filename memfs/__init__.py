"""memfs: persistent, shared, inspectable memory for Claude agents (FUSE over S3).

``memfs.__version__`` is the installed distribution's version; pyproject.toml is its only source.
The distribution is ``memfs-s3`` on PyPI (``memfs`` there is an unrelated project); the import
package and the command are ``memfs``.
"""

from __future__ import annotations

DISTRIBUTION = "memfs-s3"


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(DISTRIBUTION)
        except PackageNotFoundError:  # a source tree on sys.path that was never installed
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
