"""Regularising documents into searchable text and tags.

HTML (scripts, styles, navigation and other chrome removed; title), PDF (the
text layer via pypdf; pages without one hand their images to OCR; at most
``max_pdf_pages`` pages), DOCX, PPTX and XLSX (text, tables, slides, sheets;
author and title), SRT and WebVTT subtitles (cue text with its times), images
(dimensions, camera, date taken; the image goes to OCR), audio (artist,
album, genre, year, duration), plain text and Markdown (YAML front matter
becomes tags). Guards: Pillow's pixel limit against decompression bombs,
size and ratio checks on Office zip files, a cell budget for workbooks, and
any file a parser cannot read is a clear permanent error (never a retry loop).

Formats with places in them say where each stretch of the text came from
(``segments``, see ``app.kit.spans``): a PDF's pages, a deck's slides, a
workbook's sheets, a subtitle file's cues. Their offsets are those of the
text returned, so each reader builds its text piece by piece (``_joined``)
rather than tidying the whole afterwards, which would move them.

Everything here is synchronous and CPU-bound: callers run it in a thread.
"""

from __future__ import annotations

import codecs
import datetime
import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.ingest import subtitles
from app.kit.spans import MAX_SEGMENTS, Segment
from app.providers.errors import MissingDependency, PermanentError

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
SRT = "application/x-subrip"
VTT = "text/vtt"
# What else SRT files are declared as (there is no registered type).
SRT_ALIASES = (SRT, "text/srt", "application/srt", "text/x-srt")
ZIP_MAX_UNPACKED = 256 * 2**20
ZIP_MAX_RATIO = 100
ZIP_MAX_ENTRIES = 10_000
MAX_IMAGE_PIXELS = 64_000_000
SCANNED_PAGE_CHARS = 20  # a page with less text than this is treated as a scan
# Cells read from one workbook, empty ones included: what bounds the work
# (and the text) of a sheet declaring a million rows or a 16,384-column row.
MAX_WORKBOOK_CELLS = 200_000

_SUFFIX_TYPES = {
    ".html": "text/html",
    ".htm": "text/html",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".pdf": "application/pdf",
    ".docx": DOCX,
    ".pptx": PPTX,
    ".xlsx": XLSX,
    ".srt": SRT,
    ".vtt": VTT,
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".mp3": "audio/mpeg",
    ".m4a": "audio/mp4",
    ".ogg": "audio/ogg",
    ".flac": "audio/flac",
    ".wav": "audio/wav",
}


class UnreadableDocument(PermanentError):
    """The file is malformed, hostile or of a kind keepmem cannot read."""


@dataclass(slots=True)
class Extracted:
    text: str
    tags: dict[str, str] = field(default_factory=dict)
    images: list[bytes] = field(default_factory=list)  # for OCR, in reading order
    note: str = ""  # what was left out (page cap), for the job result
    segments: list[Segment] = field(default_factory=list)  # where each stretch of text came from


def media_type(content_type: str | None, filename: str | None, data: bytes) -> str:
    """The media type to read ``data`` as: the declared one unless it is
    generic, else the file name's suffix, else the bytes' signature.

    Subtitles are the exception: browsers declare ``.srt`` and ``.vtt`` files
    as ``text/plain``, which would read their timings as prose."""
    declared = (content_type or "").split(";")[0].strip().lower()
    suffix = ""
    if filename and "." in filename:
        suffix = "." + filename.rsplit(".", 1)[-1].lower()
    if declared == "text/plain" and suffix in (".srt", ".vtt"):
        return _SUFFIX_TYPES[suffix]
    if declared and declared not in ("application/octet-stream", "binary/octet-stream"):
        return declared
    if suffix in _SUFFIX_TYPES:
        return _SUFFIX_TYPES[suffix]
    head = data[:16]
    if head.startswith(b"%PDF"):
        return "application/pdf"
    if head.startswith(b"\x89PNG"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"ID3", b"\xff\xfb")):
        return "audio/mpeg"
    return declared or "text/plain"


def extract(
    data: bytes, content_type: str, *, charset: str | None = None, max_pdf_pages: int = 1000
) -> Extracted:
    """Text and tags of a document of the given media type."""
    kind = content_type.split(";")[0].strip().lower()
    readers: list[tuple[Callable[[str], bool], Callable[[], Extracted]]] = [
        (lambda k: k in ("text/html", "application/xhtml+xml"), lambda: _html(data, charset)),
        (lambda k: k == "application/pdf", lambda: _pdf(data, max_pdf_pages)),
        (lambda k: k == DOCX, lambda: _docx(data)),
        (lambda k: k == PPTX, lambda: _pptx(data)),
        (lambda k: k == XLSX, lambda: _xlsx(data)),
        (lambda k: k in SRT_ALIASES or k == VTT, lambda: _cues(data, charset)),
        (lambda k: k.startswith("image/"), lambda: _image(data)),
        (lambda k: k.startswith("audio/"), lambda: _audio(data)),
        (
            lambda k: k.startswith("text/") or k.endswith(("json", "xml")),
            lambda: _text(data, charset),
        ),
    ]
    for matches, read in readers:
        if matches(kind):
            try:
                return read()
            except (PermanentError, MissingDependency):
                raise
            except Exception as exc:
                raise UnreadableDocument(
                    f"cannot read this {kind} file: {type(exc).__name__}: {exc}"
                ) from exc
    raise UnreadableDocument(f"keepmem cannot read {kind} files")


def _decode(data: bytes, charset: str | None) -> str:
    for encoding in (charset, "utf-8"):
        if encoding:
            try:
                return data.decode(encoding)
            except (UnicodeDecodeError, LookupError):
                continue
    return data.decode("latin-1")


def _tidy(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _joined(
    pieces: list[tuple[str, dict[str, Any]]], sep: str, *, hard: bool = False
) -> tuple[str, list[Segment]]:
    """The pieces' texts joined by ``sep``, and a segment for each (saying
    where it came from) starting at its offset in the result. Empty pieces
    are left out: a segment always has text."""
    parts: list[str] = []
    segments: list[Segment] = []
    at = 0
    for text, where in pieces:
        if not text:
            continue
        if parts:
            at += len(sep)
        segments.append(Segment(at, where, hard))
        parts.append(text)
        at += len(text)
    return sep.join(parts), segments


# -- text and Markdown -------------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)
MAX_FRONT_MATTER_CHARS = 64 * 1024
MAX_FRONT_MATTER_TAGS = 100
MAX_FRONT_MATTER_VALUE_CHARS = 1000


def _front_matter(raw: str) -> Any:
    """YAML front matter, bounded: no aliases (a few bytes of them expand
    exponentially: "billion laughs"), at most MAX_FRONT_MATTER_CHARS."""
    import yaml

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("YAML aliases are not allowed in front matter")
            return super().compose_node(parent, index)

    if len(raw) > MAX_FRONT_MATTER_CHARS:
        return None
    try:
        return yaml.load(raw, Loader=Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None


def _text(data: bytes, charset: str | None) -> Extracted:
    text = _decode(data, charset).replace("\x00", "")
    tags: dict[str, str] = {}
    m = _FRONT_MATTER.match(text)
    if m:
        meta = _front_matter(m.group(1))
        if isinstance(meta, dict):
            text = text[m.end() :]
            for key, value in list(meta.items())[:MAX_FRONT_MATTER_TAGS]:
                if isinstance(value, list):
                    value = ", ".join(str(v) for v in value if not isinstance(v, dict | list))
                if isinstance(key, str) and value is not None and not isinstance(value, dict):
                    tags[key.lower()] = str(value)[:MAX_FRONT_MATTER_VALUE_CHARS]
    return Extracted(text=text.strip(), tags=tags)


# -- HTML --------------------------------------------------------------------------

_CHROME = (
    "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object",
    "nav", "header", "footer", "aside", "form", "button", "select",
)  # fmt: skip
_BLOCKS = (
    "p", "div", "section", "article", "main", "li", "ul", "ol", "table", "tr", "br",
    "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "dd", "dt", "figcaption",
)  # fmt: skip


def _html(data: bytes, charset: str | None) -> Extracted:
    import lxml.html
    from lxml import etree

    root = lxml.html.document_fromstring(_decode(data, charset).replace("\x00", ""))
    tags: dict[str, str] = {}
    title = root.findtext(".//title")
    if title and title.strip():
        tags["title"] = " ".join(title.split())
    for el in list(root.iter(*_CHROME, "title", etree.Comment)):
        el.drop_tree()  # keeps the text that follows it
    for el in root.iter(*_BLOCKS):
        el.tail = "\n" + (el.tail or "")
    body = etree.tostring(root, method="text", encoding="unicode")
    return Extracted(text=_tidy(body), tags=tags)


# -- Office ------------------------------------------------------------------------


def _check_zip(data: bytes) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise UnreadableDocument(f"not a valid Office file (zip): {exc}") from exc
    entries = archive.infolist()
    unpacked = sum(i.file_size for i in entries)
    packed = max(sum(i.compress_size for i in entries), 1)
    if len(entries) > ZIP_MAX_ENTRIES or unpacked > ZIP_MAX_UNPACKED:
        raise UnreadableDocument(
            f"refusing an Office file that unpacks to {unpacked} bytes in {len(entries)} parts "
            f"(limits {ZIP_MAX_UNPACKED} bytes, {ZIP_MAX_ENTRIES} parts): a zip bomb?"
        )
    if unpacked > 10 * 2**20 and unpacked / packed > ZIP_MAX_RATIO:
        raise UnreadableDocument(
            f"refusing an Office file compressed {unpacked // packed}:1: a zip bomb?"
        )


def _core_tags(props: Any) -> dict[str, str]:
    tags = {}
    for key in ("title", "author"):
        value = getattr(props, key, None)
        if value and str(value).strip():
            tags[key] = str(value).strip()
    return tags


def _docx(data: bytes) -> Extracted:
    _check_zip(data)
    try:
        import docx
    except ImportError as exc:
        raise MissingDependency("docx", "python-docx") from exc
    document = docx.Document(io.BytesIO(data))
    lines = [p.text for p in document.paragraphs if p.text.strip()]
    for table in document.tables:
        for row in table.rows:
            lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    return Extracted(text=_tidy("\n".join(lines)), tags=_core_tags(document.core_properties))


def _pptx(data: bytes) -> Extracted:
    _check_zip(data)
    try:
        import pptx
    except ImportError as exc:
        raise MissingDependency("pptx", "python-pptx") from exc
    deck = pptx.Presentation(io.BytesIO(data))
    slides: list[tuple[str, dict[str, Any]]] = []
    for number, slide in enumerate(deck.slides, start=1):
        lines = [f"Slide {number}"]
        for shape in slide.shapes:
            if getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
                lines.append(shape.text_frame.text)
            if getattr(shape, "has_table", False):
                for row in shape.table.rows:
                    lines.append(" | ".join(cell.text.strip() for cell in row.cells))
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and notes.text.strip():
            lines.append(notes.text)
        slides.append((_tidy("\n".join(lines)), {"slide": number}))
    tags = _core_tags(deck.core_properties) | {"slides": str(len(deck.slides))}
    text, segments = _joined(slides, "\n\n")
    return Extracted(text=text, tags=tags, segments=segments)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 3.0 is how a spreadsheet stores the integer 3
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()  # a date: spreadsheets keep them as midnights
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return " ".join(str(value).split())


def _xlsx(data: bytes) -> Extracted:
    """Each worksheet a hard segment: "Sheet: <title>", then a line per
    non-empty row, cells joined by " | " (cached formula values, not the
    formulas). At most MAX_WORKBOOK_CELLS cells are read; the note says where
    reading stopped."""
    _check_zip(data)
    try:
        import openpyxl
    except ImportError as exc:
        raise MissingDependency("xlsx", "openpyxl") from exc
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets: list[tuple[str, dict[str, Any]]] = []
        budget, stopped = MAX_WORKBOOK_CELLS, ""
        worksheets = book.worksheets
        for index, sheet in enumerate(worksheets):
            if budget <= 0:
                stopped = stopped or f"sheets from {sheet.title!r} on"
                break
            # The declared dimensions are the writer's word: rows are read as
            # they are in the file instead (a lying size neither hides cells
            # nor makes millions of empty ones).
            sheet.reset_dimensions()
            lines = [f"Sheet: {sheet.title}"]
            for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
                budget -= max(len(row), 1)
                if budget < 0:
                    later = len(worksheets) - index - 1
                    stopped = f"sheet {sheet.title!r} from row {number} on" + (
                        f" and {later} later sheet(s)" if later else ""
                    )
                    break
                cells = [_cell(v) for v in row]
                while cells and not cells[-1]:
                    cells.pop()
                while cells and not cells[0]:
                    cells.pop(0)
                if cells:
                    lines.append(" | ".join(cells))
            sheets.append(("\n".join(lines), {"sheet": sheet.title}))
        props = book.properties
        tags = {"sheets": str(len(worksheets))}
    finally:
        book.close()
    for key, value in (("title", props.title), ("author", props.creator)):
        if value and str(value).strip():
            tags[key] = str(value).strip()
    text, segments = _joined(sheets, "\n\n", hard=True)
    note = f"only the first {MAX_WORKBOOK_CELLS} cells: {stopped} left out" if stopped else ""
    return Extracted(text=text, tags=tags, note=note, segments=segments)


# -- subtitles ---------------------------------------------------------------------


def _cues(data: bytes, charset: str | None) -> Extracted:
    """SRT or WebVTT: a line per cue (markup removed, a voice's name kept as
    "Name: "), each its own segment with the cue's start and end in seconds."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raw = data.decode("utf-16")
    else:
        raw = _decode(data, charset)
    found = subtitles.parse(raw.replace("\x00", ""))
    if not found.cues:
        raise UnreadableDocument(
            "no subtitle cues found"
            + (f" ({found.malformed} with malformed times)" if found.malformed else "")
            + ": expected cues like '00:00:01,000 --> 00:00:04,000' followed by their text"
        )
    cues = found.cues[:MAX_SEGMENTS]
    text, segments = _joined(
        [(c.text, {"start_s": c.start_s, "end_s": c.end_s}) for c in cues], "\n"
    )
    left_out = []
    if found.malformed:
        left_out.append(f"{found.malformed} cue(s) with malformed times")
    if len(found.cues) > len(cues):
        left_out.append(f"{len(found.cues) - len(cues)} cue(s) over {MAX_SEGMENTS}")
    tags = {"cues": str(len(cues)), "duration": f"{round(max(c.end_s for c in cues))}s"}
    note = "left out: " + ", ".join(left_out) if left_out else ""
    return Extracted(text=text, tags=tags, note=note, segments=segments)


# -- PDF ---------------------------------------------------------------------------


def _pdf(data: bytes, max_pages: int) -> Extracted:
    try:
        import pypdf
    except ImportError as exc:
        raise MissingDependency("pdf", "pypdf") from exc
    reader = pypdf.PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise UnreadableDocument("the PDF is encrypted")
    pages = reader.pages
    texts: list[tuple[str, dict[str, Any]]] = []
    images: list[bytes] = []
    for number, page in enumerate(list(pages)[:max_pages], start=1):
        text = page.extract_text() or ""
        if len(text.strip()) >= SCANNED_PAGE_CHARS:
            texts.append((_tidy(text), {"page": number}))
            continue
        for image in page.images:  # a scanned page: its pictures go to OCR
            images.append(image.data)
    tags: dict[str, str] = {"pages": str(len(pages))}
    meta = reader.metadata
    if meta is not None:
        for key, name in (("title", "/Title"), ("author", "/Author")):
            value = meta.get(name)
            if value and str(value).strip():
                tags[key] = str(value).strip()
    note = f"only the first {max_pages} of {len(pages)} pages" if len(pages) > max_pages else ""
    text, segments = _joined(texts, "\n\n")
    return Extracted(text=text, tags=tags, images=images, note=note, segments=segments)


# -- images and audio ----------------------------------------------------------------


def _image(data: bytes) -> Extracted:
    import warnings

    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise UnreadableDocument(
                    f"image of {width}x{height} pixels exceeds {MAX_IMAGE_PIXELS}: "
                    "a decompression bomb?"
                )
            exif = image.getexif()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise UnreadableDocument(f"refusing the image: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise UnreadableDocument("not an image Pillow can read") from exc
    tags = {"dimensions": f"{width}x{height}"}
    camera = " ".join(str(exif.get(t, "")).strip("\x00 ") for t in (0x010F, 0x0110)).strip()
    if camera:
        tags["camera"] = camera
    taken = exif.get_ifd(0x8769).get(0x9003) or exif.get(0x0132)
    if taken:
        tags["taken"] = str(taken).strip("\x00 ").replace(":", "-", 2)
    return Extracted(text="", tags=tags, images=[data])


def _audio(data: bytes) -> Extracted:
    try:
        from tinytag import TinyTag
    except ImportError as exc:
        raise MissingDependency("audio", "tinytag") from exc
    tag = TinyTag.get(file_obj=io.BytesIO(data))
    tags: dict[str, str] = {}
    for key in ("artist", "album", "genre", "year", "title"):
        value = getattr(tag, key, None)
        if value:
            tags[key] = str(value).strip()
    if tag.duration:
        tags["duration"] = f"{round(tag.duration)}s"
    parts = [tags.get("title", "Audio recording")]
    if "artist" in tags:
        parts.append(f"by {tags['artist']}")
    if "album" in tags:
        parts.append(f"from the album {tags['album']}")
    if "year" in tags:
        parts.append(f"({tags['year']})")
    if "genre" in tags:
        parts.append(f"genre {tags['genre']}")
    if "duration" in tags:
        parts.append(f"duration {tags['duration']}")
    comment = getattr(tag, "comment", None)
    text = " ".join(parts) + "." + (f"\n{comment}" if comment else "")
    return Extracted(text=text, tags=tags)
