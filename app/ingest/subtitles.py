"""Subtitle files (SRT and WebVTT) into cues: times in seconds and plain text.

One tolerant parser for both, written for the files people actually have
rather than the letter of either format: a byte-order mark, CRLF or CR line
ends, no blank line at the end or between cues (an SRT counter line just
before a timing line is taken as the next cue's number), cue settings after
the times, hours optional, ``,`` or ``.`` before the milliseconds. WebVTT's
header and its NOTE, STYLE and REGION blocks are skipped.

A cue whose timing line does not parse (or ends before it starts) is
skipped and counted, never guessed at: its times would label the text
wrongly. Markup goes (``<i>``, ``<c.x>``, ``<00:01.000>``, ``<font …>``,
``{\\an8}``); a WebVTT voice ``<v Name>`` becomes "Name: ", which is who said
it. A cue's lines become one line.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_TIME = r"(?:(\d{1,3}):)?(\d{1,2}):(\d{1,2})[.,](\d{1,3})"
_TIMING = re.compile(rf"^{_TIME}[ \t]*-->[ \t]*{_TIME}(?:[ \t].*)?$")
_VOICE = re.compile(r"<v(?:\.[^\s>]*)?[ \t]+([^>]*)>", re.IGNORECASE)
_MARKUP = re.compile(
    r"</?[A-Za-z][^<>]*>"  # <i>, </b>, <c.yellow>, <lang en>, <font color=…>
    r"|<(?:\d+:)?\d{2}:\d{2}\.\d{3}>"  # karaoke timestamps
    r"|\{\\[^{}]*\}"  # SSA overrides some SRT files carry: {\an8}
)
_SKIPPED_BLOCKS = ("NOTE", "STYLE", "REGION", "WEBVTT")


@dataclass(frozen=True, slots=True)
class Cue:
    start_s: float
    end_s: float
    text: str


@dataclass(slots=True)
class Parsed:
    cues: list[Cue] = field(default_factory=list)
    malformed: int = 0  # cues skipped for timing lines that did not parse


def _seconds(hours: str | None, minutes: str, seconds: str, fraction: str) -> float | None:
    m, s = int(minutes), int(seconds)
    if m > 59 or s > 59:
        return None
    # "1,5" is half a second: the digits are a fraction, not a count of ms.
    return round(int(hours or 0) * 3600 + m * 60 + s + int(fraction.ljust(3, "0")) / 1000, 3)


def timing(line: str) -> tuple[float, float] | None:
    """The start and end of a timing line, or None when it is malformed."""
    m = _TIMING.match(line.strip())
    if m is None:
        return None
    start, end = _seconds(*m.group(1, 2, 3, 4)), _seconds(*m.group(5, 6, 7, 8))
    if start is None or end is None or end < start:
        return None
    return start, end


def cue_text(lines: list[str]) -> str:
    """A cue's lines as one line of plain text."""
    out = []
    for line in lines:
        line = _VOICE.sub(lambda m: f"{' '.join(m.group(1).split())}: ", line)
        line = " ".join(html.unescape(_MARKUP.sub("", line)).split())
        if line:
            out.append(line)
    return " ".join(out)


def _is_timing_line(line: str) -> bool:
    # A cue's text may hold an arrow; a timing line starts with its time.
    return "-->" in line and line[:1].isdigit()


def _block_keyword(line: str) -> bool:
    word = line.split(None, 1)[0] if line.split() else ""
    return word in _SKIPPED_BLOCKS or line.startswith("WEBVTT")


def parse(text: str) -> Parsed:
    """The cues of an SRT or WebVTT file, in file order."""
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out = Parsed()
    times: tuple[float, float] | None = None
    body: list[str] | None = None  # the current cue's lines; None outside a cue
    skipping = False  # inside a header, NOTE, STYLE or REGION block

    def close() -> None:
        if body is not None and times is not None:
            said = cue_text(body)
            if said:
                out.cues.append(Cue(times[0], times[1], said))

    for raw in lines:
        line = raw.strip()
        if not line:
            close()
            body, times, skipping = None, None, False
        elif _is_timing_line(line):
            if body and body[-1].isdigit():
                body.pop()  # the next cue's number (no blank line before it)
            close()
            times, body, skipping = timing(line), [], False
            if times is None:
                out.malformed += 1
        elif skipping:
            continue
        elif body is None:
            # A cue identifier, or the start of a block that is not a cue.
            skipping = _block_keyword(line)
        else:
            body.append(line)
    close()
    return out
