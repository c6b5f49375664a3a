"""Long documents of real shape, made in the test: a report PDF of many
pages (headings, prose, tables), the same text as DOCX, a slide deck, a
workbook and subtitles. Prose is generated from word pools with a fixed
seed, so every page reads differently and every run is the same."""

from __future__ import annotations

import io
import random

from tests import docs

SUBJECTS = [
    "The survey team", "The harbour board", "A visiting engineer", "The parish council",
    "The night watchman", "Our field botanist", "The railway company", "The county archivist",
    "A retired sea captain", "The school inspector", "The mill owner", "The district nurse",
]  # fmt: skip
VERBS = [
    "recorded", "questioned", "measured", "repaired", "mapped", "described", "counted",
    "photographed", "restored", "inspected", "catalogued", "surveyed",
]  # fmt: skip
OBJECTS = [
    "the tidal gauges", "the orchard walls", "the old tithe barn", "the quarry tramway",
    "the signal cabin", "the chapel roof", "the drainage ditches", "the lime kilns",
    "the ferry landing", "the weather station", "the grain store", "the stone bridge",
]  # fmt: skip
WHEN = [
    "after the spring floods", "during the long frost", "before the harvest fair",
    "in the dry summer", "after the gale of March", "at the autumn audit",
    "during the coal strike", "before the new road opened",
]  # fmt: skip
NEEDLE = "The niece of the ferryman rebuilt the tide clock from a broken sewing machine."
NEEDLE_EDITED = "The niece of the ferryman rebuilt the tide clock from a borrowed pocket watch."
NEEDLE_PAGE = 50


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(WHEN)}."


def report(pages: int = 60, *, needle: str = NEEDLE, seed: int = 7) -> list[list[str]]:
    """Pages of lines: a heading, prose, and a table every fifth page; the
    needle sentence alone on a line of page NEEDLE_PAGE."""
    rng = random.Random(seed)
    out = []
    for n in range(1, pages + 1):
        lines = [f"Chapter {n}: notes on the {rng.choice(OBJECTS)[4:]}"]
        for _ in range(14):
            lines.append(sentence(rng))
        if n % 5 == 0:
            lines.append("Year | Site | Visitors | Repairs")
            for row in range(4):
                site, visitors = rng.choice(OBJECTS)[4:], rng.randint(5, 900)
                lines.append(f"{1900 + n + row} | {site} | {visitors} | {rng.randint(0, 9)}")
        if n == NEEDLE_PAGE:
            lines.insert(7, needle)
        out.append(lines)
    return out


def pdf(pages: list[list[str]], *, title: str = "Parish report") -> bytes:
    """A PDF with a text layer: headings in bold at 14 pt, the rest at 10 pt."""
    return docs.pages_pdf(pages, title=title, size=10, leading=16, bold_first=True)


def docx(pages: list[list[str]]) -> bytes:
    import docx as python_docx

    document = python_docx.Document()
    for lines in pages:
        document.add_heading(lines[0], level=1)
        prose = [x for x in lines[1:] if "|" not in x]
        table = [x.split(" | ") for x in lines[1:] if "|" in x]
        for line in prose:
            document.add_paragraph(line)
        if table:
            grid = document.add_table(rows=len(table), cols=len(table[0]))
            for r, row in enumerate(table):
                for c, cell in enumerate(row):
                    grid.cell(r, c).text = cell
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def pptx(pages: list[list[str]]) -> bytes:
    import pptx as python_pptx

    deck = python_pptx.Presentation()
    layout = deck.slide_layouts[1]
    for lines in pages:
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = lines[0]
        slide.placeholders[1].text = "\n".join(x for x in lines[1:] if "|" not in x)
    buf = io.BytesIO()
    deck.save(buf)
    return buf.getvalue()


def xlsx(pages: list[list[str]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    first = book.active
    for n, lines in enumerate(pages, start=1):
        sheet = first if n == 1 else book.create_sheet()
        sheet.title = f"Chapter {n}"
        sheet.append(["Line", "Text"])
        for i, line in enumerate(lines[1:], start=1):
            sheet.append([i, line])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def srt(pages: list[list[str]]) -> bytes:
    """One cue per line, four seconds each."""
    cues = []
    t = 0
    for lines in pages:
        for line in lines:
            a, b = t, t + 4
            stamp = lambda s: f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d},000"  # noqa: E731
            cues.append(f"{len(cues) + 1}\n{stamp(a)} --> {stamp(b)}\n{line}\n")
            t = b
    return "\n".join(cues).encode()
