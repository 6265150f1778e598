# SPDX-License-Identifier: GPL-2.0
"""A small line-chart PNG writer for `make bench`, standard library only (zlib and
struct): panels of lines with markers over categorical x positions, a log10 y axis,
text in a built-in 5x7 bitmap font (upper case, digits, a few signs)."""
import math
import struct
import zlib

# 5x7 glyphs: seven rows of five bits, most significant bit on the left.
FONT = {
    'A': (0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11), 'B': (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    'C': (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E), 'D': (0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E),
    'E': (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F), 'F': (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),
    'G': (0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F), 'H': (0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    'I': (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E), 'J': (0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C),
    'K': (0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11), 'L': (0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F),
    'M': (0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11), 'N': (0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11),
    'O': (0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E), 'P': (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    'Q': (0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D), 'R': (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    'S': (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E), 'T': (0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    'U': (0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E), 'V': (0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04),
    'W': (0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A), 'X': (0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11),
    'Y': (0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04), 'Z': (0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F),
    '0': (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E), '1': (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    '2': (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F), '3': (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    '4': (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02), '5': (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    '6': (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E), '7': (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    '8': (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E), '9': (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    '.': (0, 0, 0, 0, 0, 0x0C, 0x0C), ',': (0, 0, 0, 0, 0x0C, 0x04, 0x08),
    '%': (0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03), '-': (0, 0, 0, 0x1F, 0, 0, 0),
    '/': (0, 0x01, 0x02, 0x04, 0x08, 0x10, 0), ':': (0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0),
    '(': (0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02), ')': (0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08),
    '=': (0, 0, 0x1F, 0, 0x1F, 0, 0), '_': (0, 0, 0, 0, 0, 0, 0x1F), ' ': (0,) * 7,
}
WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (0, 0, 0), (110, 110, 110), (225, 225, 225)


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            for x in range(max(0, x0), min(self.w, x1 + 1)):
                self.dot(x, y, c)

    def line(self, x0, y0, x1, y1, c, width=1):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        r = width // 2
        for k in range(n + 1):
            x = round(x0 + (x1 - x0) * k / n)
            y = round(y0 + (y1 - y0) * k / n)
            self.rect(x - r, y - r, x - r + width - 1, y - r + width - 1, c)

    def text(self, x, y, s, c=BLACK, scale=1):
        """Text with its top-left corner at (x, y); returns the width drawn."""
        for ch in s.upper():
            rows = FONT.get(ch, FONT[' '])
            for ry, bits in enumerate(rows):
                for rx in range(5):
                    if bits & (0x10 >> rx):
                        self.rect(x + rx * scale, y + ry * scale, x + rx * scale + scale - 1,
                                  y + ry * scale + scale - 1, c)
            x += 6 * scale
        return len(s) * 6 * scale

    def marker(self, x, y, kind, c):
        if kind == 0:       # square
            self.rect(x - 3, y - 3, x + 3, y + 3, c)
        elif kind == 1:     # diamond
            for d in range(4):
                self.rect(x - 3 + d, y - d, x + 3 - d, y + d, c)
        elif kind == 2:     # cross
            self.line(x - 4, y - 4, x + 4, y + 4, c, 2)
            self.line(x - 4, y + 4, x + 4, y - 4, c, 2)
        else:               # triangle
            for d in range(7):
                self.rect(x - d // 2, y - 3 + d, x + d // 2, y - 3 + d, c)

    def png(self):
        raw = b''.join(b'\0' + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack('>I', len(data)) + kind + data +
                    struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff))
        return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', self.w, self.h, 8, 2, 0, 0, 0)) +
                chunk(b'IDAT', zlib.compress(raw, 9)) + chunk(b'IEND', b''))


def fmt_tick(v):
    return ('%g' % v) if v < 1e5 else '%dK' % (v // 1000)


def panel(cv, x0, y0, w, h, title, xlabels, series, ylabel):
    """series: [(name, color, marker, [value or None per x])]; log10 y axis."""
    cv.text(x0 + 4, y0, title, BLACK, 2)
    left, top, right, bottom = x0 + 52, y0 + 24, x0 + w - 10, y0 + h - 30
    vals = [v for _, _, _, vs in series for v in vs if v]
    lo = 10 ** math.floor(math.log10(min(vals))) if vals else 1
    hi = 10 ** math.ceil(math.log10(max(vals))) if vals else 10
    if hi <= lo:
        hi = lo * 10

    def ypos(v):
        return round(bottom - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (bottom - top))

    d = lo
    while d <= hi * 1.0001:
        y = ypos(d)
        cv.line(left, y, right, y, LIGHT)
        s = fmt_tick(d)
        cv.text(left - 6 - 6 * len(s), y - 3, s, GREY)
        for m in (2, 5):
            if d * m < hi:
                cv.line(left - 2, ypos(d * m), left, ypos(d * m), GREY)
        d *= 10
    cv.line(left, top, left, bottom, BLACK)
    cv.line(left, bottom, right, bottom, BLACK)
    n = len(xlabels)

    def xpos(i):
        return round(left + 20 + i * (right - left - 40) / max(1, n - 1))
    for i, lab in enumerate(xlabels):
        cv.line(xpos(i), bottom, xpos(i), bottom + 3, BLACK)
        cv.text(xpos(i) - 3 * len(lab), bottom + 8, lab, BLACK)
    cv.text(right - 6 * len(ylabel), bottom + 20, ylabel, GREY)
    for name, color, kind, vs in series:
        pts = [(xpos(i), ypos(v)) for i, v in enumerate(vs) if v]
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            cv.line(ax, ay, bx, by, color, 2)
        for x, y in pts:
            cv.marker(x, y, kind, color)


def chart(path, title, panels, legend, ylabel, cols=2, pw=420, ph=280):
    """panels: [(title, xlabels, series)]; legend: [(name, color, marker)]."""
    rows = (len(panels) + cols - 1) // cols
    cv = Canvas(cols * pw + 20, rows * ph + 70)
    cv.text(10, 8, title, BLACK, 2)
    x = 10
    for name, color, kind in legend:
        cv.marker(x + 4, 40, kind, color)
        cv.line(x - 4, 40, x + 12, 40, color, 2)
        x += 44 + cv.text(x + 20, 33, name, BLACK, 2)
    for k, (ptitle, xlabels, series) in enumerate(panels):
        panel(cv, 10 + (k % cols) * pw, 60 + (k // cols) * ph, pw - 10, ph - 10, ptitle, xlabels, series, ylabel)
    with open(path, 'wb') as f:
        f.write(cv.png())
