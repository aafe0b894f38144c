"""Small real images and a real one-page PDF, built here byte by byte, for the tests of images and files."""

from __future__ import annotations

import struct
import zlib


def png(width: int, height: int, shade: int = 0x80) -> bytes:
    """A valid grey PNG of ``width`` x ``height`` pixels, every one of ``shade``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([shade]) * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pdf(pages: int = 1) -> bytes:
    """A minimal PDF with ``pages`` empty pages (its objects are what readers count pages by)."""
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>",
        *["<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages,
    ]
    body = "%PDF-1.4\n" + "".join(f"{i + 1} 0 obj\n{o}\nendobj\n" for i, o in enumerate(objects))
    return (body + "trailer\n<< /Root 1 0 R >>\n%%EOF\n").encode()
