// The graph around a note or an entity, drawn as SVG: rings by hops, an edge
// per link that reached a node, labelled with its edge tag or relation. A
// click (or Enter) on a node walks from it; the same walk is listed as a table.

import { api } from "../api.js";
import { field, h, input, link, replace, select, svg, table } from "../dom.js";

const SIZE = 640;
const RING = 120;

function key(node) {
  return `${node.kind}:${node.id}`;
}

function label(node) {
  const text = node.kind === "entity" ? node.id.replace(/^[^:]*:/, "") : node.id;
  return text.length > 24 ? `${text.slice(0, 23)}…` : text;
}

function layout(walk) {
  const byHops = new Map();
  for (const r of walk.reached) {
    if (!byHops.has(r.hops)) byHops.set(r.hops, []);
    byHops.get(r.hops).push(r);
  }
  const where = new Map([[key(walk.start), { x: SIZE / 2, y: SIZE / 2 }]]);
  for (const [hops, ring] of byHops) {
    const radius = Math.min(RING * hops, SIZE / 2 - 40);
    ring.forEach((node, i) => {
      const angle = (2 * Math.PI * i) / ring.length + hops * 0.4;
      where.set(key(node), { x: SIZE / 2 + radius * Math.cos(angle), y: SIZE / 2 + radius * Math.sin(angle) });
    });
  }
  return where;
}

function drawing(walk, ctx) {
  const where = layout(walk);
  const edges = [];
  const nodes = [];
  for (const r of walk.reached) {
    const from = where.get(key(r.via));
    const to = where.get(key(r));
    if (!from || !to) continue;
    edges.push(
      svg("line", { x1: from.x, y1: from.y, x2: to.x, y2: to.y, class: "edge" }),
      svg("text", { x: (from.x + to.x) / 2, y: (from.y + to.y) / 2, class: "edge-label" }, r.via.predicate),
    );
  }
  for (const node of [walk.start, ...walk.reached]) {
    const at = where.get(key(node));
    const go = () => ctx.go("graph", { [node.kind]: node.id });
    const g = svg(
      "g",
      {
        class: `node ${node.kind}${node === walk.start ? " start" : ""}`,
        tabindex: 0,
        role: "button",
        "aria-label": `${node.kind} ${node.id}: walk from here`,
        "data-node": key(node),
        onclick: go,
        onkeydown: (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            go();
          }
        },
      },
      svg("title", {}, `${node.kind}: ${node.id}`),
      svg("circle", { cx: at.x, cy: at.y, r: node === walk.start ? 14 : 9 }),
      svg("text", { x: at.x + 12, y: at.y - 12 }, label(node)),
    );
    nodes.push(g);
  }
  return svg(
    "svg",
    { viewBox: `0 0 ${SIZE} ${SIZE}`, class: "graph", role: "group", "aria-label": `Graph around ${walk.start.kind} ${walk.start.id}` },
    edges,
    nodes,
  );
}

function nodeLink(node) {
  return node.kind === "note"
    ? link(node.id, "note", { id: node.id })
    : link(node.id, "graph", { entity: node.id });
}

export async function render(main, params, ctx) {
  const start = input("start", { value: params.note || params.entity || "", placeholder: "a note id, or person:melanie" });
  const kind = select("kind", [["note", "a note"], ["entity", "an entity"]], params.entity ? "entity" : "note");
  const depth = input("depth", { type: "number", min: 1, max: 5, value: params.depth || 2 });
  const form = h(
    "form",
    { class: "inline", "aria-label": "Walk the graph" },
    field("Start at", kind),
    field("Id or entity key", start),
    field("Depth", depth),
    h("button", { type: "submit" }, "Walk"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    ctx.go("graph", { [kind.value]: start.value.trim(), depth: depth.value });
  });
  const top = await api("GET", "/v1/entities", { query: { limit: 15 } });
  const known = h(
    "section",
    { "aria-labelledby": "entities-title" },
    h("h2", { id: "entities-title" }, "Most mentioned entities"),
    top.entities.length
      ? h("ul", { class: "entities" }, top.entities.map((e) => h("li", {}, link(e.name, "graph", { entity: e.key }), ` (${e.kind}, ${e.notes})`)))
      : h("p", {}, "No entities yet."),
  );
  if (!params.note && !params.entity) {
    replace(main, h("h1", {}, "Graph"), form, known);
    return null;
  }
  const walk = await api("GET", "/v1/graph/walk", {
    query: { note: params.note, entity: params.entity, depth: params.depth || 2, limit: 60 },
  });
  const rows = walk.reached.map((r) =>
    h("tr", {}, h("td", {}, r.kind), h("td", {}, nodeLink(r)), h("td", {}, String(r.hops)), h("td", {}, r.via.predicate), h("td", {}, nodeLink(r.via))),
  );
  replace(
    main,
    h("h1", {}, "Graph around ", nodeLink(walk.start)),
    form,
    walk.reached.length ? drawing(walk, ctx) : h("p", {}, "Nothing is linked to it yet."),
    table(["Kind", "Node", "Hops", "Link", "Reached from"], rows, "Reached nodes, nearest first"),
    known,
  );
  return null;
}
