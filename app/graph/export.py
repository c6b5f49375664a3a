"""The graph written out for other tools: GraphML (one document: entities,
notes, topics and every link between them) and CSV (one table at a time).

Pure serialisation: the rows come from the graph service, already read
within the caller's scope and capped. Escaping is left to the libraries
(``xml.etree`` and ``csv``); only the characters XML 1.0 cannot carry at all
(control characters other than tab and newlines) are replaced, so a summary
holding one still yields a document every GraphML reader can parse.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

GRAPHML_MEDIA_TYPE = "application/graphml+xml"
CSV_MEDIA_TYPE = "text/csv"
GRAPHML_NS = "http://graphml.graphdrawing.org/xmlns"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"
_SCHEMA = "http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd"

# Columns of each CSV table, in order.
TABLES: dict[str, tuple[str, ...]] = {
    "entities": ("key", "name", "kind"),
    "mentions": ("note_id", "entity_key", "span_start", "span_end"),
    "relations": ("note_id", "subject_key", "predicate", "object_key", "span_start", "span_end"),
    "edges": ("source_id", "predicate", "target_id", "origin"),
    "topics": ("topic", "value", "note_id"),
}

# GraphML attribute keys: (id, for, attr.name, attr.type, default).
_KEYS: tuple[tuple[str, str, str, str, str | None], ...] = (
    ("g_truncated", "graph", "truncated", "boolean", "false"),
    ("g_truncated_tables", "graph", "truncated_tables", "string", None),
    ("n_type", "node", "type", "string", None),
    ("n_name", "node", "name", "string", None),
    ("n_kind", "node", "kind", "string", None),
    ("n_summary", "node", "summary", "string", None),
    ("n_part", "node", "part", "boolean", "false"),
    ("n_stub", "node", "stub", "boolean", "false"),
    ("e_type", "edge", "type", "string", None),
    ("e_predicate", "edge", "predicate", "string", None),
    ("e_note", "edge", "note", "string", None),
    ("e_span_start", "edge", "span_start", "int", None),
    ("e_span_end", "edge", "span_end", "int", None),
    ("e_origin", "edge", "origin", "string", None),
)

# Not allowed anywhere in an XML 1.0 document, escaped or not.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


@dataclass(frozen=True, slots=True)
class NoteHead:
    """What a note node shows: its summary (trimmed) and how it was made."""

    summary: str
    part: bool = False
    stub: bool = False


@dataclass(slots=True)
class GraphRows:
    """Everything one export holds, as read for the caller."""

    entities: list[tuple[str, str, str]]
    mentions: list[tuple[str, str, int, int]]
    relations: list[tuple[str, str, str, str, int, int]]
    edges: list[tuple[str, str, str, str]]
    topics: list[tuple[str, str, str]]  # (topic key, value as written, note id)
    notes: dict[str, NoteHead] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)  # tables that were cut


@dataclass(frozen=True, slots=True)
class Exported:
    body: bytes
    media_type: str
    filename: str
    truncated: bool


def note_node(note_id: str) -> str:
    return f"note:{note_id}"


def topic_node(topic: str) -> str:
    return f"topic:{topic}"


def note_ids(rows: GraphRows) -> set[str]:
    """The notes the export draws: those that mention an entity, are an end
    of a note edge or carry a topic."""
    ids = {n for n, _, _, _ in rows.mentions}
    ids.update(s for s, _, _, _ in rows.edges)
    ids.update(t for _, _, t, _ in rows.edges)
    ids.update(n for _, _, n in rows.topics)
    return ids


class _Writer:
    """Builds the GraphML tree; every edge's ends exist as nodes (an end
    whose own row was cut by the cap is added bare)."""

    def __init__(self, graph: ET.Element) -> None:
        self.graph = graph
        self.nodes: set[str] = set()
        self.edges = 0

    def node(self, node_id: str, **data: Any) -> None:
        if node_id in self.nodes:
            return
        self.nodes.add(node_id)
        el = ET.SubElement(self.graph, "node", id=xml_safe(node_id))
        _data(el, "n", data)

    def edge(
        self, source: str, target: str, ends: tuple[dict[str, Any], dict[str, Any]], **data: Any
    ) -> None:
        self.node(source, **ends[0])
        self.node(target, **ends[1])
        el = ET.SubElement(
            self.graph,
            "edge",
            id=f"e{self.edges}",
            source=xml_safe(source),
            target=xml_safe(target),
        )
        self.edges += 1
        _data(el, "e", data)


def _data(el: ET.Element, prefix: str, data: dict[str, Any]) -> None:
    for name, value in data.items():
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        ET.SubElement(el, "data", key=f"{prefix}_{name}").text = xml_safe(text)


def _entity(key: str) -> dict[str, Any]:
    kind = key.split(":", 1)[0] if ":" in key else None
    return {"type": "entity", "kind": kind}


def graphml(rows: GraphRows) -> bytes:
    """One GraphML document (directed, parallel edges allowed): nodes are
    entities (id = entity key), notes (``note:<id>``) and topics
    (``topic:<value>``); edges are mentions (note -> entity), relations
    (subject -> object), note edges (source -> target) and topic membership
    (note -> topic). A graph attribute says whether any table was cut."""
    root = ET.Element(
        "graphml",
        {"xmlns": GRAPHML_NS, "xmlns:xsi": _XSI, "xsi:schemaLocation": f"{GRAPHML_NS} {_SCHEMA}"},
    )
    for key_id, domain, name, kind, default in _KEYS:
        declared = ET.SubElement(
            root, "key", {"id": key_id, "for": domain, "attr.name": name, "attr.type": kind}
        )
        if default is not None:
            ET.SubElement(declared, "default").text = default
    graph = ET.SubElement(root, "graph", id="keepmem", edgedefault="directed")
    _data(graph, "g", {"truncated": bool(rows.truncated)})
    if rows.truncated:
        _data(graph, "g", {"truncated_tables": ",".join(rows.truncated)})
    w = _Writer(graph)
    for key, name, kind in rows.entities:
        w.node(key, type="entity", name=name, kind=kind)
    for note_id in sorted(note_ids(rows)):
        head = rows.notes.get(note_id, NoteHead(""))
        w.node(
            note_node(note_id),
            type="note",
            name=note_id,
            summary=head.summary,
            part=head.part or None,
            stub=head.stub or None,
        )
    names: dict[str, str] = {}
    for topic, value, _ in rows.topics:
        names.setdefault(topic, value)
    for topic, name in sorted(names.items()):
        w.node(topic_node(topic), type="topic", name=name)
    bare_note = {"type": "note"}
    for note_id, key, start, end in rows.mentions:
        w.edge(note_node(note_id), key, (bare_note, _entity(key)), type="mention",
               predicate="mentions", span_start=start, span_end=end)  # fmt: skip
    for note_id, subject, predicate, obj, start, end in rows.relations:
        w.edge(subject, obj, (_entity(subject), _entity(obj)), type="relation",
               predicate=predicate, note=note_id, span_start=start, span_end=end)  # fmt: skip
    for source, predicate, target, origin in rows.edges:
        w.edge(note_node(source), note_node(target), (bare_note, bare_note), type="edge",
               predicate=predicate, origin=origin)  # fmt: skip
    for topic, _, note_id in rows.topics:
        w.edge(note_node(note_id), topic_node(topic), (bare_note, {"type": "topic"}),
               type="topic", predicate="topic")  # fmt: skip
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body


def csv_text(table: str, rows: Iterable[Sequence[Any]]) -> bytes:
    """One table as CSV (RFC 4180 quoting by the csv module), header first."""
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(TABLES[table])
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")
