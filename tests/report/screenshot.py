#!/usr/bin/env python3
"""Renders `attn-tune report` of a table in headless Chromium at desktop width and checks that
the screenshot is not blank: it must hold many distinct colours, with the page's text and
figures spread over its height. Exits 77 (CTest's skip) when no Chromium is installed.

usage: screenshot.py ATTN_TUNE TABLE.json WORKDIR [--keep PNG]
"""
import os
import shutil
import struct
import subprocess
import sys
import zlib

SKIP = 77


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def decode_png(path):
    """RGB(A) rows of an 8-bit, non-interlaced PNG (what Chromium writes), without PIL."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, ctype, _, _, interlace = header
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {ctype})")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        f = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    exe, table, work = sys.argv[1:4]
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    chromium = find_chromium()
    if chromium is None:
        print("no chromium on PATH: skipped")
        return SKIP
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    page = os.path.join(work, "report.html")
    subprocess.run([exe, "report", table, "--out", page], check=True)
    png = keep or os.path.join(work, "report.png")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--force-color-profile=srgb", "--window-size=1280,2400",
                    f"--screenshot={os.path.abspath(png)}",
                    "file://" + os.path.abspath(page)],
                   check=True, capture_output=True, timeout=90)
    width, height, bpp, rows = decode_png(png)
    print(f"screenshot {width}x{height}")
    assert width == 1280, f"expected a 1280 px wide screenshot, got {width}"
    colours = set()
    bands_with_ink = 0
    band = max(1, height // 20)
    for start in range(0, height, band):
        background = rows[start][:bpp]
        ink = 0
        for y in range(start, min(height, start + band), 4):
            row = rows[y]
            for x in range(0, width * bpp, bpp * 3):
                px = row[x:x + bpp]
                colours.add(px[:3])
                ink += 1 if px != background else 0
        bands_with_ink += 1 if ink > 20 else 0
    print(f"{len(colours)} distinct colours; {bands_with_ink} of 20 bands hold ink")
    assert len(colours) >= 50, "the page rendered (nearly) uniform: blank"
    assert bands_with_ink >= 15, "most of the page is empty"
    print("the page renders non-blank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
