"""Test documents made on the spot (no binary fixtures in the repository):
a PDF with a text layer, a scanned PDF, a PNG with text, DOCX, PPTX, an MP3
with ID3 tags, an HTML page."""

from __future__ import annotations

import io


def text_image(lines: list[str], size: tuple[int, int] = (1000, 260)) -> bytes:
    """A PNG of black text on white, large enough for OCR."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=44)
    for i, line in enumerate(lines):
        draw.text((30, 30 + 80 * i), line, fill="black", font=font)
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def photo_with_exif() -> bytes:
    """A JPEG photo of text with camera and date-taken EXIF."""
    from PIL import Image

    img = Image.open(io.BytesIO(text_image(["Harbour ferry timetable"])))
    exif = Image.Exif()
    exif[0x010F] = "Fujifilm"
    exif[0x0110] = "X100V"
    exif.get_ifd(0x8769)[0x9003] = "2024:06:01 09:30:00"
    out = io.BytesIO()
    img.save(out, "JPEG", exif=exif, quality=95)
    return out.getvalue()


def scanned_pdf(lines: list[str]) -> bytes:
    """A PDF whose only page is a picture of text (no text layer)."""
    from PIL import Image

    img = Image.open(io.BytesIO(text_image(lines))).convert("RGB")
    out = io.BytesIO()
    img.save(out, "PDF", resolution=100)
    return out.getvalue()


def text_pdf(lines: list[str], *, title: str, author: str) -> bytes:
    """A one-page PDF with a real text layer (Helvetica) and document info."""
    return pages_pdf([lines], title=title, author=author)


def pages_pdf(
    pages: list[list[str]],
    *,
    title: str = "Pages",
    author: str = "Tests",
    size: int = 14,
    leading: int = 24,
    bold_first: bool = False,
) -> bytes:
    """A PDF with a text layer, a page per list of lines (Helvetica at
    ``size`` points, ``leading`` apart; with ``bold_first`` each page's first
    line a 14-point bold heading) and document info."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    first = 6  # 1 catalog, 2 page tree, 3 and 4 fonts, 5 info, then (page, contents) pairs
    kids = " ".join(f"{first + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold >>",
        f"<< /Title ({esc(title)}) /Author ({esc(author)}) >>".encode(),
    ]
    for i, lines in enumerate(pages):
        ops = []
        for n, line in enumerate(lines):
            font, points = ("/F2", 14) if bold_first and n == 0 else ("/F1", size)
            ops.append(f"BT {font} {points} Tf 60 {740 - leading * n} Td ({esc(line)}) Tj ET")
        body = " ".join(ops).encode()
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> >>" % (first + 2 * i + 1)
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(body) + body + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 5 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def docx_file(*, title: str, author: str, paragraphs: list[str], table: list[list[str]]) -> bytes:
    import docx

    document = docx.Document()
    for p in paragraphs:
        document.add_paragraph(p)
    grid = document.add_table(rows=len(table), cols=len(table[0]))
    for r, row in enumerate(table):
        for c, value in enumerate(row):
            grid.cell(r, c).text = value
    document.core_properties.title = title
    document.core_properties.author = author
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_file(*, title: str, author: str, slides: list[tuple[str, str]]) -> bytes:
    import pptx

    deck = pptx.Presentation()
    for heading, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = heading
        slide.placeholders[1].text = body
    deck.core_properties.title = title
    deck.core_properties.author = author
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def mp3_file(tags: dict[str, str], frames: int = 200) -> bytes:
    """ID3v2.3 tags followed by silent MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz)."""

    def frame(fid: str, value: str) -> bytes:
        body = b"\x00" + value.encode("latin-1")
        return fid.encode() + len(body).to_bytes(4, "big") + b"\x00\x00" + body

    ids = {"title": "TIT2", "artist": "TPE1", "album": "TALB", "genre": "TCON", "year": "TYER"}
    body = b"".join(frame(ids[k], v) for k, v in tags.items())
    n = len(body)
    size = bytes([(n >> 21) & 0x7F, (n >> 14) & 0x7F, (n >> 7) & 0x7F, n & 0x7F])
    mpeg = b"\xff\xfb\x90\x64" + b"\x00" * 413
    return b"ID3\x03\x00\x00" + size + body + mpeg * frames


def html_page() -> str:
    return """<!doctype html><html><head><title>Tide tables of Porto</title>
<style>.x { color: red }</style><script>var tracking = "SCRIPT-NOISE";</script></head>
<body><nav>Home | About | NAV-NOISE</nav>
<header>HEADER-NOISE</header>
<main><h1>Tides</h1><p>High tide in Porto reaches 3.2 metres in spring.</p>
<p>Fishermen leave at dawn.</p></main>
<footer>FOOTER-NOISE</footer></body></html>"""
