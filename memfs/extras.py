"""The optional dependencies, and the one line that says how to get one that is missing.

memfs installs with its mount's dependencies only; the rest come as extras of the distribution
``memfs-s3``: ``anthropic`` (`MemoryTool`, `AsyncMemoryTool`), ``mcp`` (``memfs mcp``) and
``demo`` (``memfs demo``: anthropic and moto). Code that imports one turns the bare
``ModuleNotFoundError`` into `MissingExtra`, whose text is the ``pip install`` line (it is still
a ``ModuleNotFoundError``, so existing ``except ImportError`` keeps working); the command line
prints it as its one error line.
"""

from __future__ import annotations

import importlib.util

from memfs import DISTRIBUTION

#: Top-level module → the extra that installs it.
EXTRA_OF = {"anthropic": "anthropic", "mcp": "mcp", "moto": "demo", "anyio": "mcp",
            "uvicorn": "mcp", "starlette": "mcp", "pika": "events"}


class MissingExtra(ModuleNotFoundError):
    """An optional dependency is not installed; ``str()`` says which extra installs it."""


def install_line(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra(exc: ModuleNotFoundError, what: str) -> ModuleNotFoundError:
    """`exc` (from importing an optional dependency for `what`) as `MissingExtra`; an import
    that fails for a module no extra provides is returned unchanged (a real bug)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return exc
    return MissingExtra(f"{what} needs the {top} package, which is not installed: "
                        f"{install_line(extra)}", name=exc.name)


def require(module: str, what: str) -> None:
    """Raise `MissingExtra` now if `module` cannot be imported (before any work starts)."""
    if importlib.util.find_spec(module) is None:
        raise missing_extra(ModuleNotFoundError(name=module), what)
