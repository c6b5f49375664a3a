# ruff: noqa: E501  (the rule table reads best as one pattern a line)
"""The offline extractor: rules, no model. Honest about what it can do.

* **Structural signals are facts**: a line of the form ``Field: value`` for
  a known profile field (``Location: Berlin``, ``Job title: nurse``), the
  way forms, profiles and system prompts state them.
* **Phrase matches are candidates**: first-person sentences that match a
  pattern ("I moved to Berlin", "I no longer like jazz", "we decided to
  use Postgres") become memories of the speaker with confidence 0.5 and
  ``certainty=candidate``: found by find, listed, reconciled like any
  memory, but never presented as facts. A rule cannot tell irony, quotes or
  hypotheticals from statements.

Facts the agent wrote itself (``POST /v1/memories``) need no extraction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.providers.extraction import Proposed, Said

PHRASE_CONFIDENCE = 0.5
FIELD_CONFIDENCE = 0.9
_END = r"(?=\s*(?:[.!?;]|,\s|\band\b|\bbut\b|\bnow\b|\bsince\b|\bfor\b|$))"
_VALUE = r"(?P<v>[^.!?;,\n]{2,80}?)"


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str
    attribute: str
    single: bool
    pattern: re.Pattern[str]
    negated: bool = False
    say: str = ""  # the statement: "{s}" the subject, "{v}" the value


def _r(
    kind: str, attribute: str, single: bool, body: str, say: str, *, negated: bool = False
) -> Rule:
    pattern = re.compile(r"(?:^|(?<=[\s,.;:!?\"'(]))(?:" + body + ")" + _END, re.IGNORECASE)
    return Rule(kind, attribute, single, pattern, negated, say)


_I = r"(?:i|i've|i have|i'm|i am|we|we've|we have|we're|we are)"
RULES: tuple[Rule, ...] = (
    # Retractions first: "I no longer live in X" must not read as "live in X".
    _r("fact", "lives_in", True, r"i (?:no longer|don't|do not) live in " + _VALUE + r"(?: anymore)?",
       "{s} no longer lives in {v}", negated=True),
    _r("fact", "works_at", True, r"i (?:no longer work|don't work|do not work|quit my job|left my job) (?:at|for) " + _VALUE,
       "{s} no longer works at {v}", negated=True),
    _r("preference", "likes", False, r"i (?:no longer|don't|do not) (?:like|love|enjoy) " + _VALUE + r" anymore",
       "{s} no longer likes {v}", negated=True),
    _r("preference", "likes", False, r"i (?:no longer|stopped) (?:like|liking|love|loving|enjoy|enjoying) " + _VALUE,
       "{s} no longer likes {v}", negated=True),
    _r("fact", "lives_in", True,
       r"(?:i live in|i'm living in|i am living in|we live in|i(?:'ve| have)? (?:just )?(?:moved|relocated) to|"
       r"we(?:'ve| have)? (?:just )?(?:moved|relocated) to|i'm now based in|i am now based in|"
       r"i'm based in|i am based in) " + _VALUE,
       "{s} lives in {v}"),
    _r("fact", "hometown", True, r"(?:i'm|i am|i come) (?:originally )?from " + _VALUE, "{s} is from {v}"),
    _r("fact", "works_at", True,
       r"(?:i work|i'm working|i am working) (?:at|for) " + _VALUE
       + r"|i(?:'ve| have)? (?:just )?(?:started working at|started a new job at|got a job at|got a new job at|started at)" + _VALUE.replace("?P<v>", "?P<w>"),
       "{s} works at {v}"),
    _r("fact", "job_title", True,
       r"(?:i work as|i'm working as|i am working as|my job is|my new role is|i'm now working as) (?:an? )?" + _VALUE,
       "{s} works as {v}"),
    _r("fact", "name", True, r"(?:my name is|call me|i'm called|i am called) " + _VALUE, "{s} is called {v}"),
    _r("fact", "project_name", True,
       r"(?:we(?:'ve| have)? renamed (?:the |our )?project to|(?:the|our) project is (?:now )?(?:called|named)) " + _VALUE,
       "The project of {s} is called {v}"),
    _r("fact", "relationship_status", True, r"(?:i'm|i am|i just got) (?P<v>single|married|engaged|divorced|widowed)",
       "{s} is {v}"),
    _r("preference", "dislikes", False, r"(?:i hate|i dislike|i don't like|i do not like|i can't stand) " + _VALUE,
       "{s} dislikes {v}"),
    _r("preference", "likes", False,
       r"(?:i (?:really )?(?:like|love|enjoy|adore)|i'm (?:a big )?fan of|i am (?:a big )?fan of) " + _VALUE,
       "{s} likes {v}"),
    _r("preference", "prefers", False, r"i (?:would )?prefer " + _VALUE, "{s} prefers {v}"),
    _r("decision", "decided", False,
       r"(?:we|i)(?:'ve| have)? decided (?:to |on |that )?" + _VALUE + r"|let's go with " + _VALUE.replace("?P<v>", "?P<w>"),
       "{s} decided {v}"),
    _r("task", "todo", False,
       r"(?:i need to|i have to|i must|remind me to|i should|todo:|to do:) " + _VALUE,
       "{s} needs to {v}"),
)  # fmt: skip

# Profile fields stated as "Field: value" (one per line): facts, not phrases.
FIELDS = {
    "name": ("name", "{s} is called {v}"),
    "location": ("lives_in", "{s} lives in {v}"),
    "city": ("lives_in", "{s} lives in {v}"),
    "lives in": ("lives_in", "{s} lives in {v}"),
    "company": ("works_at", "{s} works at {v}"),
    "employer": ("works_at", "{s} works at {v}"),
    "job": ("job_title", "{s} works as {v}"),
    "job title": ("job_title", "{s} works as {v}"),
    "role": ("job_title", "{s} works as {v}"),
    "occupation": ("job_title", "{s} works as {v}"),
    "timezone": ("timezone", "The timezone of {s} is {v}"),
    "language": ("language", "{s} speaks {v}"),
    "email": ("email", "The email of {s} is {v}"),
    "birthday": ("birthday", "The birthday of {s} is {v}"),
}
_FIELD = re.compile(
    # One line each: a heading such as "About me:" never takes the next line.
    r"^[ \t]*(?:[-*][ \t]*)?(?P<k>[A-Za-z][A-Za-z ]{1,20})[ \t]*:[ \t]*(?P<v>[^\n]{1,200}?)[ \t]*$",
    re.M,
)
_TRIM = re.compile(r"^(?:the|a|an)\s+(?:city\s+of\s+|town\s+of\s+)?", re.IGNORECASE)
# What follows a place, an employer or a liked thing is not part of it:
# "Leipzig from Ljubljana", "Acme as a contractor", "hiking with my dog".
_CLAUSE = re.compile(
    r"\s+(?:from|as|with|because|since|after|before|when|where|which|who|while|until|"
    r"near|to be|so that)\b.*$",
    re.IGNORECASE,
)
_WHOLE = frozenset({"decided", "todo"})  # a decision or a task keeps its clauses
# Values that are a pronoun or a feeling: "I love it", "I'm working on that".
_VAGUE = frozenset(
    [
        "it",
        "that",
        "this",
        "them",
        "him",
        "her",
        "you",
        "this",
        "one",
        "those",
        "these",
        "something",
        "anything",
        "everything",
        "so",
        "much",
        "it",
        "so",
        "much",
        "too",
        "doing",
    ]
)


_WHEN = re.compile(
    r"(?:\s+(?:last|this|next|every)\s+\w+|\s+\d+\s+\w+\s+ago|\s+(?:yesterday|today|tomorrow|"
    r"tonight|recently|lately|again|already|anymore|too|as well|a while ago|soon|these days|"
    r"nowadays|for now|for good|now)|\s+in\s+(?:the\s+)?(?:spring|summer|autumn|fall|winter)|"
    r"\s+in\s+(?:january|"
    r"february|march|april|may|june|july|august|september|october|november|december|\d{4})|"
    r"\s+on\s+\w+day)+$",
    re.IGNORECASE,
)


def _value(raw: str) -> str:
    """The value without the time words after it ("Berlin last month")."""
    value = " ".join(raw.split()).strip(" \"'()")
    return _WHEN.sub("", value).strip(" \"'()")


def _vague(value: str) -> bool:
    words = value.casefold().split()
    return not words or " ".join(words) in _VAGUE or words[0] in {"it", "that", "this", "you"}


def _from_fields(said: Said) -> list[Proposed]:
    out = []
    for m in _FIELD.finditer(said.text):
        found = FIELDS.get(" ".join(m.group("k").casefold().split()))
        if found is None:
            continue
        attribute, say = found
        value = _value(m.group("v"))
        if not value:
            continue
        out.append(
            Proposed(
                kind="fact",
                subject=said.speaker,
                attribute=attribute,
                value=value,
                statement=say.format(s=said.speaker, v=value),
                confidence=FIELD_CONFIDENCE,
                single=True,
                sources=[said.n],
            )
        )
    return out


def _from_phrases(said: Said) -> list[Proposed]:
    out: list[Proposed] = []
    taken: list[tuple[int, int]] = []
    for rule in RULES:
        for m in rule.pattern.finditer(said.text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # a retraction already read this span
            raw = m.groupdict().get("v") or m.groupdict().get("w") or ""
            value = _value(raw)
            if rule.attribute not in _WHOLE:
                value = _CLAUSE.sub("", _TRIM.sub("", value))
            if _vague(value):
                continue
            taken.append((m.start(), m.end()))
            out.append(
                Proposed(
                    kind=rule.kind,
                    subject=said.speaker,
                    attribute=rule.attribute,
                    value=value,
                    statement=rule.say.format(s=said.speaker, v=value),
                    confidence=PHRASE_CONFIDENCE,
                    single=rule.single,
                    negated=rule.negated,
                    sources=[said.n],
                    certainty="candidate",
                )
            )
    return out


def extract(said: Sequence[Said]) -> list[Proposed]:
    """Memories the rules read in the messages: profile fields of any message
    (a system prompt's are about the thread's user); first-person phrases of
    users, and of assistant messages that name a person as their speaker
    (two people in one thread). An agent's own sentences ("I need to check
    the logs") are not memories about anyone, and are skipped."""
    out: list[Proposed] = []
    for s in said:
        if s.role in ("user", "system", "assistant"):
            out.extend(_from_fields(s))
        if s.role == "user" or (s.role == "assistant" and s.named):
            out.extend(_from_phrases(s))
    return out
