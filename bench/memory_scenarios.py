# ruff: noqa: SIM905  (the value pools read best as one string each)
"""The scenarios of bench/memory.py: short conversations with the traps of
memory formation, built in code from a seed (no outside data), each message
with the gold facts a careful reader takes from it, each scenario with
questions and the values that must and must not answer them.

Traps: STALE (a value changes; some sent out of order, some in one batch),
PREFERENCE (a preference changes), DELETION (a retraction), ENTITY (two
people whose names differ by a letter, each with their own values, asked
across users or in one group thread), RESTATEMENT (the same fact said again
and again: it must not multiply) and DISTRACTOR (a fact buried in chatter
and in facts about other people).

Phrasings vary on purpose: each template says whether the offline rules
(app/memories/rules.py) are expected to read it (``True``) or not; the
benchmark measures what they actually read and reports the miss rate of
both groups.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

SEED = 33
BASE = datetime(2024, 1, 8, 9, 0)
_WORD = re.compile(r"\w+")


def words(value: str) -> list[str]:
    return _WORD.findall(value.casefold())


def contains(haystack: str, needle: str) -> bool:
    """Whether ``needle``'s words appear, in order and together, in ``haystack``."""
    h, n = words(haystack), words(needle)
    return bool(n) and any(h[i : i + len(n)] == n for i in range(len(h) - len(n) + 1))


@dataclass(frozen=True, slots=True)
class Fact:
    """What a message says (the gold reading)."""

    subject: str
    attribute: str
    value: str
    single: bool
    negated: bool = False
    kind: str = "fact"
    replaces: str | None = None  # an older value of the subject it takes the place of
    rules_read: bool = True  # whether the template is meant to be readable by the rules

    def statement(self) -> str:
        verb = {
            "lives_in": "lives in",
            "works_at": "works at",
            "project_name": "has a project called",
            "job_title": "works as",
            "prefers": "prefers",
            "likes": "likes",
        }[self.attribute]
        return f"{self.subject} {'no longer ' if self.negated else ''}{verb} {self.value}"


@dataclass(slots=True)
class Msg:
    role: str
    name: str
    text: str
    at: datetime
    facts: list[Fact] = field(default_factory=list)


@dataclass(slots=True)
class Batch:
    thread: str
    user: str
    messages: list[Msg]
    round: int  # batches are sent round by round, the worker drained in between


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    user: str | None  # the find's tag filter (None: the whole project)
    subject: str
    attribute: str
    right: str
    right_negated: bool  # a deletion: the answer is the retraction
    stale: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()  # another person's values


@dataclass(slots=True)
class Scenario:
    id: str
    trap: str
    variant: str
    batches: list[Batch]
    questions: list[Question]
    # (subject, attribute, value for many-valued attributes else "", restated)
    slots: list[tuple[str, str, str, bool]]


SINGLE = {"lives_in": True, "works_at": True, "project_name": True, "job_title": True}

CITIES = (
    "Lisbon Porto Munich Hamburg Dresden Leipzig Bremen Zurich Basel Geneva Vienna Graz Prague "
    "Brno Krakow Gdansk Warsaw Vilnius Riga Tallinn Helsinki Tampere Oslo Bergen Stockholm "
    "Uppsala Gothenburg Copenhagen Aarhus Dublin Galway Cork Edinburgh Glasgow Leeds Bristol "
    "Cardiff Nantes Lyon Marseille Toulouse Bordeaux Lille Ghent Antwerp Utrecht Rotterdam "
    "Eindhoven Seville Valencia Bilbao Malaga Turin Bologna Naples Florence Verona Ljubljana "
    "Zagreb Split Sarajevo Belgrade Sofia Bucharest Cluj Budapest Debrecen Bratislava Kosice "
    "Athens Thessaloniki Izmir Ankara Tbilisi Yerevan Baku Almaty Tashkent Montreal Quebec "
    "Halifax Winnipeg Calgary Edmonton Vancouver Victoria Seattle Portland Denver Boston "
    "Austin Atlanta Chicago Detroit Toronto Ottawa Hobart Adelaide Perth Brisbane Darwin "
    "Auckland Wellington Dunedin Nairobi Kampala Accra Lagos Dakar Tunis Casablanca Cusco Lima "
    "Quito Bogota Medellin Santiago Valparaiso Montevideo Osaka Kyoto Sapporo Busan Taipei "
    "Hanoi Manila Cebu Jakarta Bandung Chennai Pune Jaipur Kochi"
).split()
FIRMS = (
    "Nordwind Bluestone Kestrel Ironleaf Quarry Helix Orbital Tandem Juniper Cobalt Lumen "
    "Granite Saffron Willow Harbor Falconer Redwood Marlin"
).split()
KINDS = (
    "Logistics Labs Analytics Foods Robotics Media Health Studios Energy Insurance Freight Optics"
).split()
PROJECTS = (
    "Bluefin Halcyon Marigold Quicksilver Tundra Zephyr Obsidian Pelican Sundial Lantern "
    "Aurora Kettle Meridian Foxglove Nimbus Basalt Cormorant Juniperus Tamarind Wayfarer "
    "Lodestar Pinecone Driftwood Kingfisher Hazelnut Moonbeam Thistle Sandpiper"
).split()
TITLES = (
    "nurse|data analyst|product designer|civil engineer|pharmacist|carpenter|translator|"
    "architect|airline pilot|pastry chef|librarian|electrician|radiographer|actuary|"
    "sound engineer|florist|paramedic|cartographer|barista trainer|tax advisor"
).split("|")
DRINKS = (
    "green tea|espresso|oat latte|rooibos|cold brew|hot chocolate|sparkling water|chai|"
    "matcha|flat white|mint tea|kombucha|lemonade|yerba mate|barley tea|tomato juice"
).split("|")
HOBBIES = (
    "jazz|salsa dancing|bouldering|sudoku|birdwatching|sourdough baking|trail running|chess|"
    "karaoke|pottery|board games|sailing|opera|knitting|road cycling|surfing|camping|"
    "slam poetry|anime|gardening|fencing|origami"
).split("|")
NAMES = (
    "Maria Tobias Priya Kwame Ingrid Mateo Yuki Farah Oskar Leila Dmitri Noor Bruno Aisha "
    "Henrik Camila Rahul Greta Tomasz Imani Felix Zara Paolo Hana Viktor Esme Idris Nadia"
).split()
PAIRS = (
    ("Jon", "John"),
    ("Ann", "Anne"),
    ("Marc", "Mark"),
    ("Sara", "Sarah"),
    ("Eric", "Erik"),
    ("Katy", "Katie"),
)


def _phrasings(**tables: str) -> dict[str, list[tuple[str, bool]]]:
    """Templates separated by " | ", each marked + (written for the rules'
    patterns) or - (a phrasing they are not meant to read)."""
    return {
        attr: [(t.strip()[1:], t.strip()[0] == "+") for t in text.split(" | ")]
        for attr, text in tables.items()
    }


# {v} the value, {o} the old value, {V} the value capitalised, {a} "a" or "an"
AFFIRM = _phrasings(
    lives_in="+I live in {v}. | +I'm based in {v} these days. | "
    "+We live in {v}, near the old harbour. | -Home is {v} for me. | "
    "-I've been living in {v} for a few years. | +I live in {v}, yes.",
    works_at="+I work at {v}. | +I work for {v}, in the Berlin office. | -I'm employed by {v}. | "
    "+I've got a job at {v}. | +I work at {v} as a contractor.",
    project_name="+Our project is called {v}. | +The project is named {v}. | "
    "-We call our project {v}.",
    job_title="+I work as {a} {v}. | +My job is {v}. | -I'm {a} {v} by trade.",
    prefers="+I prefer {v}. | +I would prefer {v} in the mornings. | -{V} is my drink of choice.",
    likes="+I love {v}. | +I really enjoy {v}. | +I'm a big fan of {v}. | "
    "-{V} is my favourite thing to do.",
)
CHANGE = _phrasings(
    lives_in="+I moved to {v} last month. | +We relocated to {v} in the spring. | "
    "+I live in {v} now. | +I moved to {v} from {o}. | "
    "-Just settled into a flat in {v}, {o} is behind me. | +I'm now based in {v}. | "
    "-New address: I'm in {v} since March.",
    works_at="+I started a new job at {v}. | +I got a new job at {v}! | "
    "-I left {o} and started working at {v}. | -I took a position at {v}. | +I work at {v} now.",
    project_name="+We renamed the project to {v}. | +The project is now called {v}. | "
    "-We're calling the project {v} from now on. | -Project codename changed from {o} to {v}.",
    job_title="+My new role is {v}. | +I'm now working as {a} {v}. | "
    "-I retrained and I'm {a} {v} now.",
    prefers="+I prefer {v} now. | -I switched from {o} to {v}. | "
    "+These days I would prefer {v}, honestly.",
)
RETRACT = _phrasings(
    likes="+I no longer like {v}. | +I stopped enjoying {v}. | +I don't like {v} anymore. | "
    "-Please forget that I like {v}. | -I'm over {v}, honestly.",
    lives_in="+I don't live in {v} anymore. | +I no longer live in {v}. | -I moved out of {v}.",
    works_at="+I quit my job at {v}. | +I no longer work at {v}. | -I'm not with {v} anymore.",
)
RESTATE = _phrasings(
    lives_in="+As I said, I live in {v}. | -Still living in {v}, yes. | "
    "+I live in the city of {v}. | +I'm based in {v}.",
    works_at="+Like I said, I work at {v}. | -Still at {v}. | +I work for {v}.",
    job_title="+Like I said, I work as {a} {v}. | -Still {a} {v}, yes. | +My job is {v}.",
)
PROFILE = {"lives_in": "Location", "works_at": "Company", "job_title": "Occupation"}
QUESTIONS = {
    "lives_in": [
        "Where does {n} live now?",
        "Which city is {n} living in?",
        "Where is {n} based these days?",
    ],
    "works_at": [
        "Where does {n} work?",
        "Which company is {n} working for now?",
        "Who is {n}'s employer?",
    ],
    "project_name": [
        "What is {n}'s project called now?",
        "What's the current name of {n}'s project?",
    ],
    "job_title": ["What does {n} do for a living?", "What is {n}'s job?"],
    "prefers": ["What does {n} prefer to drink?", "Which drink does {n} prefer these days?"],
    "likes": ["Does {n} still like {v}?", "Is {n} into {v}?"],
}
CHATTER = [
    "Can you recommend a good podcast for my commute?",
    "The weather has been awful lately.",
    "What's a quick recipe for dinner tonight?",
    "Remind me what we talked about last time.",
    "I watched a documentary about octopuses yesterday.",
    "My laptop keeps running out of battery.",
    "Any tips for sleeping better?",
    "Traffic was terrible this morning.",
    "Do you know a good book about the history of maps?",
    "My neighbour's dog barked all night.",
    "How do I convert cups to grams?",
    "The train was late again.",
    "What should I get my friend for her birthday?",
    "I spilled coffee on my keyboard, ugh.",
    "Is it worth learning to touch type?",
    "Thanks, that helps a lot.",
    "Let's plan the weekend later.",
    "Can you summarise the news for me?",
]
ASSISTANT = [
    "Sure, here are a few ideas.",
    "Got it, noted.",
    "Happy to help with that.",
    "Here is a short summary.",
    "That sounds frustrating; here is what might help.",
    "Good question, let me explain.",
    "I can keep track of that for you.",
    "Thanks for letting me know.",
]
OTHERS = [
    ("My sister lives in {v}.", "lives_in", "{n}'s sister"),
    ("My colleague Ruth works at {v}.", "works_at", "Ruth"),
    ("My brother just moved to {v}.", "lives_in", "{n}'s brother"),
]


class Pools:
    """Values drawn without replacement: every value is said about one
    person only, so a value in a result names whose it is."""

    def __init__(self, rng: random.Random) -> None:
        firms = [f"{a} {b}" for a in FIRMS for b in KINDS]
        self.left = {
            "lives_in": rng.sample(CITIES, len(CITIES)),
            "works_at": rng.sample(firms, len(firms)),
            "project_name": rng.sample(PROJECTS, len(PROJECTS)),
            "job_title": rng.sample(TITLES, len(TITLES)),
            "prefers": rng.sample(DRINKS, len(DRINKS)),
            "likes": rng.sample(HOBBIES, len(HOBBIES)),
        }

    def take(self, attribute: str) -> str:
        return self.left[attribute].pop()


class Builder:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pools = Pools(rng)
        self.seen: dict[tuple[str, str], int] = {}  # template use, for variety

    def pick(self, options: list[tuple[str, bool]], key: str) -> tuple[str, bool]:
        """Templates in turn (seeded start), so every phrasing is used."""
        n = self.seen.get((key, ""), self.rng.randrange(len(options)))
        self.seen[(key, "")] = n + 1
        return options[n % len(options)]

    def say(self, kind: str, attribute: str, name: str, v: str, o: str = "") -> tuple[str, Fact]:
        table = {"affirm": AFFIRM, "change": CHANGE, "retract": RETRACT, "restate": RESTATE}[kind]
        text, readable = self.pick(table[attribute], f"{kind}:{attribute}")
        line = text.format(v=v, o=o, V=v[:1].upper() + v[1:], a="an" if v[:1] in "aeiou" else "a")
        single = SINGLE.get(attribute, False)
        fact = Fact(
            name,
            attribute,
            v,
            single,
            negated=kind == "retract",
            kind="fact" if single else "preference",
            rules_read=readable,
            replaces=o or None,
        )
        return line, fact

    def chatter(self, name: str, at: datetime, n: int) -> list[Msg]:
        out = []
        for i in range(n):
            t = at + timedelta(minutes=i)
            if i % 2:
                out.append(Msg("assistant", "helper", self.rng.choice(ASSISTANT), t))
            else:
                out.append(Msg("user", name, self.rng.choice(CHATTER), t))
        return out

    def conversation(
        self, name: str, at: datetime, said: list[tuple[str, list[Fact]]], chat: int = 2
    ) -> list[Msg]:
        """Chatter, then each statement answered by the assistant."""
        msgs = self.chatter(name, at, chat)
        t = at + timedelta(minutes=chat + 1)
        for line, facts in said:
            msgs.append(Msg("user", name, line, t, facts))
            msgs.append(
                Msg("assistant", "helper", self.rng.choice(ASSISTANT), t + timedelta(seconds=30))
            )
            t += timedelta(minutes=2)
        return msgs

    def question(self, attribute: str, name: str, v: str = "") -> str:
        return self.rng.choice(QUESTIONS[attribute]).format(n=name, v=v)


def _stale(
    b: Builder, sid: str, user: str, name: str, attribute: str, variant: str, day: datetime
) -> Scenario:
    values = [b.pools.take(attribute) for _ in range(3 if variant == "three values" else 2)]
    lines: list[tuple[str, list[Fact]]] = []
    for i, v in enumerate(values):
        line, fact = b.say(
            "affirm" if i == 0 else "change", attribute, name, v, values[i - 1] if i else ""
        )
        lines.append((line, [fact]))
    if variant == "same batch":
        batches = [Batch(sid, user, b.conversation(name, day, lines), 0)]
    else:
        batches = [
            Batch(sid, user, b.conversation(name, day + timedelta(days=40 * i), [ln]), i)
            for i, ln in enumerate(lines)
        ]
        if variant == "out of order":  # the newer conversation arrives first
            batches[0].round, batches[1].round = 1, 0
    q = Question(
        b.question(attribute, name), user, name, attribute, values[-1], False, tuple(values[:-1])
    )
    return Scenario(sid, "stale", variant, batches, [q], [(name, attribute, "", False)])


def _preference(
    b: Builder, sid: str, user: str, name: str, variant: str, day: datetime
) -> Scenario:
    old, new = b.pools.take("prefers"), b.pools.take("prefers")
    line1, f1 = b.say("affirm", "prefers", name, old)
    line2, f2 = b.say("change", "prefers", name, new, old)
    # A careful reader takes the change as two memories: the new preference
    # and the old one retracted (it holds many values: nothing else ends it).
    gone = Fact(name, "prefers", old, False, negated=True, kind="preference", rules_read=False)
    second = [(line2, [f2, gone])]
    if variant == "same batch":
        batches = [Batch(sid, user, b.conversation(name, day, [(line1, [f1]), *second]), 0)]
    else:
        batches = [
            Batch(sid, user, b.conversation(name, day, [(line1, [f1])]), 0),
            Batch(sid, user, b.conversation(name, day + timedelta(days=30), second), 1),
        ]
        if variant == "out of order":
            batches[0].round, batches[1].round = 1, 0
    q = Question(b.question("prefers", name), user, name, "prefers", new, False, (old,))
    slots = [(name, "prefers", old, False), (name, "prefers", new, False)]
    return Scenario(sid, "preference", variant, batches, [q], slots)


def _deletion(
    b: Builder, sid: str, user: str, name: str, attribute: str, variant: str, day: datetime
) -> Scenario:
    v = b.pools.take(attribute)
    line1, f1 = b.say("affirm", attribute, name, v)
    line2, f2 = b.say("retract", attribute, name, v)
    batches = [
        Batch(sid, user, b.conversation(name, day, [(line1, [f1])]), 0),
        Batch(sid, user, b.conversation(name, day + timedelta(days=25), [(line2, [f2])]), 1),
    ]
    if variant == "out of order":
        batches[0].round, batches[1].round = 1, 0
    q = Question(b.question(attribute, name, v), user, name, attribute, v, True, (v,))
    single = SINGLE.get(attribute, False)
    return Scenario(
        sid, "deletion", variant, batches, [q], [(name, attribute, "" if single else v, False)]
    )


def _restatement(
    b: Builder, sid: str, user: str, name: str, attribute: str, variant: str, day: datetime
) -> Scenario:
    v = b.pools.take(attribute)
    first, fact = b.say("affirm", attribute, name, v)
    batches = [Batch(sid, user, b.conversation(name, day, [(first, [fact])]), 0)]
    times = 3 + b.rng.randrange(3)
    for i in range(1, times):
        line, again = b.say("restate", attribute, name, v)
        msgs = b.conversation(
            name, day + timedelta(days=9 * i), [(line, [again])], chat=b.rng.randrange(1, 4)
        )
        if variant == "with a profile" and i == 1:
            msgs.insert(
                0,
                Msg(
                    "system",
                    name,
                    f"{PROFILE[attribute]}: {v}",
                    msgs[0].at - timedelta(seconds=5),
                    [Fact(name, attribute, v, True)],
                ),
            )
        batches.append(Batch(sid, user, msgs, i))
    if variant == "same batch":  # said twice more within the last conversation
        line, again = b.say("restate", attribute, name, v)
        last = batches[-1].messages
        last.append(Msg("user", name, line, last[-1].at + timedelta(minutes=1), [again]))
    q = Question(b.question(attribute, name), user, name, attribute, v, False)
    return Scenario(sid, "restatement", variant, batches, [q], [(name, attribute, "", True)])


def _distractor(
    b: Builder, sid: str, user: str, name: str, attribute: str, variant: str, day: datetime
) -> Scenario:
    v = b.pools.take(attribute)
    line, fact = b.say("affirm", attribute, name, v)
    msgs = b.chatter(name, day, 10)
    msgs.insert(5, Msg("user", name, line, msgs[4].at + timedelta(seconds=20), [fact]))
    other, other_attr, whose = OTHERS[b.rng.randrange(len(OTHERS))]
    ov = b.pools.take(other_attr)
    who = whose.format(n=name)
    msgs.insert(
        2,
        Msg(
            "user",
            name,
            other.format(v=ov),
            msgs[1].at + timedelta(seconds=20),
            [Fact(who, other_attr, ov, True, rules_read=False)],
        ),
    )
    q = Question(b.question(attribute, name), user, name, attribute, v, False)
    return Scenario(
        sid, "distractor", variant, [Batch(sid, user, msgs, 0)], [q], [(name, attribute, "", False)]
    )


def _entity(b: Builder, sid: str, pair: tuple[str, str], variant: str, day: datetime) -> Scenario:
    """Two near-identical names, each with a city (one of them moves) and an
    employer: separate users asked across the project, or one group thread."""
    a, c = pair
    vals = {
        n: {"lives_in": [b.pools.take("lives_in")], "works_at": [b.pools.take("works_at")]}
        for n in pair
    }
    vals[a]["lives_in"].append(b.pools.take("lives_in"))
    group = variant == "group thread"
    batches: list[Batch] = []
    for r in range(2):
        for n in pair:
            user = sid if group else f"{sid}-{n.lower()}"
            said: list[tuple[str, list[Fact]]] = []
            if r == 0:
                for attr in ("lives_in", "works_at"):
                    line, f = b.say("affirm", attr, n, vals[n][attr][0])
                    said.append((line, [f]))
            elif n == a:
                line, f = b.say(
                    "change", "lives_in", n, vals[n]["lives_in"][1], vals[n]["lives_in"][0]
                )
                said.append((line, [f]))
            else:
                line, f = b.say("restate", "works_at", n, vals[n]["works_at"][0])
                said.append((line, [f]))
            at = day + timedelta(days=30 * r, hours=0 if n == a else 1)
            thread = sid if group else user
            batches.append(Batch(thread, user, b.conversation(n, at, said, chat=1), r))
    qs = []
    for n, other in ((a, c), (c, a)):
        asked = sid if group else None
        for attr in ("lives_in", "works_at"):
            mine = vals[n][attr]
            qs.append(
                Question(
                    b.question(attr, n),
                    asked,
                    n,
                    attr,
                    mine[-1],
                    False,
                    tuple(mine[:-1]),
                    tuple(vals[other][attr]),
                )
            )
    slots = [(n, attr, "", False) for n in pair for attr in ("lives_in", "works_at")]
    return Scenario(sid, "entity", variant, batches, qs, slots)


# (trap, attribute, variants) and how many of each
PLAN = [
    ("stale", "lives_in", ["in order", "out of order", "same batch", "three values"], 10),
    ("stale", "works_at", ["in order", "out of order", "same batch", "three values"], 8),
    ("stale", "project_name", ["in order", "out of order", "same batch"], 6),
    ("stale", "job_title", ["in order", "out of order"], 4),
    ("preference", "prefers", ["in order", "out of order", "same batch"], 6),
    ("deletion", "likes", ["in order", "out of order"], 6),
    ("deletion", "lives_in", ["in order", "out of order"], 3),
    ("deletion", "works_at", ["in order", "out of order"], 3),
    ("restatement", "lives_in", ["across conversations", "with a profile", "same batch"], 3),
    ("restatement", "works_at", ["across conversations", "with a profile", "same batch"], 3),
    ("restatement", "job_title", ["across conversations", "with a profile"], 2),
    ("distractor", "job_title", ["buried in chatter"], 3),
    ("distractor", "project_name", ["buried in chatter"], 3),
]


def build(seed: int = SEED) -> list[Scenario]:
    """Every scenario, deterministic for a seed. Solo scenarios are dealt to
    people so that nobody has two scenarios on one attribute; a person's
    scenarios are separate threads of the same user."""
    rng = random.Random(seed)
    b = Builder(rng)
    used: dict[str, set[str]] = {n: set() for n in NAMES}
    out: list[Scenario] = []
    for trap, attribute, variants, count in PLAN:
        for i in range(count):
            name = min(
                (n for n in NAMES if attribute not in used[n]),
                key=lambda n: (len(used[n]), rng.random()),
            )
            used[name].add(attribute)
            sid = f"s{len(out):02d}-{name.lower()}"
            user = name.lower()
            day = BASE + timedelta(days=len(out) % 20, hours=len(out) % 7)
            variant = variants[i % len(variants)]
            if trap == "stale":
                out.append(_stale(b, sid, user, name, attribute, variant, day))
            elif trap == "preference":
                out.append(_preference(b, sid, user, name, variant, day))
            elif trap == "deletion":
                out.append(_deletion(b, sid, user, name, attribute, variant, day))
            elif trap == "restatement":
                out.append(_restatement(b, sid, user, name, attribute, variant, day))
            else:
                out.append(_distractor(b, sid, user, name, attribute, variant, day))
    for i, pair in enumerate(PAIRS):
        sid = f"s{len(out):02d}-{pair[0].lower()}-{pair[1].lower()}"
        variant = "separate users" if i % 2 == 0 else "group thread"
        out.append(_entity(b, sid, pair, variant, BASE + timedelta(days=3 * i)))
    return out
