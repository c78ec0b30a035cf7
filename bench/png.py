"""A dependency-free PNG bar chart: panels of labelled horizontal bars in a grid.

Owns pixels only (an RGB buffer, a 5x7 bitmap font, zlib-compressed PNG chunks), so the
benchmark needs no plotting library. Text is drawn upper-case; unknown characters become '?'.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

# 5x7 glyphs, one hex byte per row (low 5 bits, MSB = leftmost pixel).
_FONT_HEX = {
    "0": "0e11131519110e", "1": "040c040404040e", "2": "0e11010204081f", "3": "1f02040201110e",
    "4": "02060a121f0202", "5": "1f101e0101110e", "6": "0608101e11110e", "7": "1f010204080808",
    "8": "0e11110e11110e", "9": "0e11110f01020c", "A": "0e1111111f1111", "B": "1e11111e11111e",
    "C": "0e11101010110e", "D": "1c12111111121c", "E": "1f10101e10101f", "F": "1f10101e101010",
    "G": "0e11101711110f", "H": "1111111f111111", "I": "0e04040404040e",
    "J": "0702020202120c", "K": "11121418141211", "L": "1010101010101f",
    "M": "111b1515111111", "N": "11111915131111", "O": "0e11111111110e", "P": "1e11111e101010",
    "Q": "0e11111115120d", "R": "1e11111e141211", "S": "0f10100e01011e", "T": "1f040404040404",
    "U": "1111111111110e", "V": "11111111110a04", "W": "1111111515150a",
    "X": "11110a040a1111", "Y": "1111110a040404", "Z": "1f01020408101f", " ": "00000000000000",
    ".": "00000000000c0c", "-": "0000001f000000", ":": "000c0c000c0c00", "(": "02040808080402",
    ")": "08040202020408", "/": "00010204081000", ",": "000000000c0408", "=": "00001f001f0000",
    "+": "0004041f040400", "_": "0000000000001f", "%": "18190204081303", ">": "08040201020408",
    "<": "02040810080402", "?": "0e110102040004", "x": "0000110a040a11",
}
_FONT = {c: bytes.fromhex(h) for c, h in _FONT_HEX.items()}

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (20, 20, 20)
GRID: Color = (225, 225, 225)
PALETTE: dict[str, Color] = {
    "floor": (120, 120, 120), "memfs": (31, 119, 180), "s3fs": (255, 127, 14),
    "rclone": (44, 160, 44), "local": (148, 103, 189),
}


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: Color) -> None:
        x0, y0, x1, y1 = max(0, x), max(0, y), min(self.w, x + w), min(self.h, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        row = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            i = (yy * self.w + x0) * 3
            self.px[i : i + len(row)] = row

    def text(self, x: int, y: int, s: str, color: Color = BLACK, scale: int = 2) -> int:
        """Draw ``s`` with its top-left at (x, y); returns the x after the last glyph."""
        for ch in s:
            glyph = _FONT.get(ch) or _FONT.get(ch.upper()) or _FONT["?"]
            for r, bits in enumerate(glyph):
                for c in range(5):
                    if bits & (0x10 >> c):
                        self.rect(x + c * scale, y + r * scale, scale, scale, color)
            x += 6 * scale
        return x

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h)
        )

        def chunk(tag: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + tag + data
                    + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


Panel = tuple[str, Sequence[tuple[str, float | None]]]

_PANEL_W = 640
_ROW_H = 22
_LABEL_CHARS = 18


def _panel_height(p: Panel) -> int:
    return 40 + _ROW_H * max(1, len(p[1])) + 12


def render(path: Path, title: str, panels: Sequence[Panel], columns: int = 2) -> None:
    """Write a PNG: ``panels`` of (title, [(label, value or None for n/a)]) in a grid."""
    rows = [panels[i : i + columns] for i in range(0, len(panels), columns)]
    heights = [max(_panel_height(p) for p in row) for row in rows]
    canvas = Canvas(_PANEL_W * columns, 40 + sum(heights))
    canvas.text(12, 12, title, scale=2)
    y0 = 40
    for row, h in zip(rows, heights, strict=True):
        for col, panel in enumerate(row):
            _draw_panel(canvas, col * _PANEL_W, y0, panel)
        y0 += h
    path.write_bytes(canvas.png())


def _draw_panel(c: Canvas, x0: int, y0: int, panel: Panel) -> None:
    title, bars = panel
    c.rect(x0 + 6, y0 + 2, _PANEL_W - 12, 1, GRID)
    c.text(x0 + 10, y0 + 10, title[:50], scale=2)
    vmax = max((v for _, v in bars if v), default=0.0) or 1.0
    label_w = _LABEL_CHARS * 6 + 14
    bar_x = x0 + 10 + label_w
    bar_max = _PANEL_W - label_w - 10 - 90
    for i, (label, value) in enumerate(bars):
        y = y0 + 36 + i * _ROW_H
        c.text(x0 + 10, y + 4, label[:_LABEL_CHARS], scale=1)
        color = PALETTE.get(label.split()[0].lower(), (90, 90, 160))
        if value is None:
            c.text(bar_x, y + 4, "n/a", color=(180, 40, 40), scale=1)
            continue
        w = max(1, int(bar_max * value / vmax)) if value > 0 else 0
        c.rect(bar_x, y + 2, w, _ROW_H - 6, color)
        c.text(bar_x + w + 6, y + 4, _num(value), scale=1)


def _num(v: float) -> str:
    if v >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"
