"""Plain-text tables and sizes for the operator commands' output."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memfs.printable import escape


def fmt_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{int(size)}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Iterable[int] = ()
          ) -> str:
    """Columns padded to their widths; cells escaped first (``memfs.printable``), so a name
    holding a newline or a bidi control neither breaks a row nor reorders it."""
    right = set(right)
    rows = [[escape(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])
