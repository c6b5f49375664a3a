// The search playground: every find parameter, and for each result the score
// of each stage and bonus, so a ranking can be read, not guessed.

import { api } from "../api.js";
import { checkbox, field, h, input, link, replace, select, table } from "../dom.js";
import { parseTags } from "./common.js";

const PARTS = [
  ["vector", "Vector"],
  ["text", "Full text"],
  ["relevance", "Fusion"],
  ["neighbour", "Neighbour"],
  ["episode", "Episode"],
  ["date", "Date"],
  ["tag", "Tag"],
  ["recency", "Recency"],
];

function parseBias(text) {
  const out = {};
  for (const item of String(text || "").split(/[,\n]/)) {
    const trimmed = item.trim();
    if (!trimmed) continue;
    const at = trimmed.lastIndexOf("=");
    const weight = Number(trimmed.slice(at + 1));
    if (at <= 0 || !Number.isFinite(weight)) throw new Error(`bias "${trimmed}" must be id=weight`);
    out[trimmed.slice(0, at).trim()] = weight;
  }
  return out;
}

function number(value) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(3);
}

function meter(value, label) {
  return h("meter", { min: 0, max: 1, value: Math.max(0, Math.min(1, value || 0)), "aria-label": label });
}

function resultRow(rank, note) {
  const why = note.explain || {};
  const cells = PARTS.map(([key, label]) =>
    h("td", { class: `num ${key}`, "data-stage": key }, number(why[key]), key === "relevance" ? meter(why[key], `${label} of ${note.id}`) : null),
  );
  return h(
    "tr",
    { "data-id": note.id },
    h("td", { class: "num" }, String(rank)),
    h("td", { class: "id" }, link(note.id, "note", { id: note.id })),
    h("td", { class: "summary" }, note.summary, why.context_only ? h("small", { class: "badge" }, " context") : null),
    h("td", { class: "num score" }, number(note.score), meter(note.score, `Score of ${note.id}`)),
    cells,
    h("td", { class: "num" }, why.bias === undefined ? "–" : String(why.bias)),
  );
}

export async function render(main, params, ctx) {
  const query = input("query", { value: params.query || "", placeholder: "What to look for" });
  const similar = input("similar_to", { value: params.similar_to || "", placeholder: "or a note id" });
  const tags = input("tags", { value: params.tags || "", placeholder: "key=value, key=value" });
  const since = input("since", { value: params.since || "" });
  const until = input("until", { value: params.until || "" });
  const scope = input("scope", { value: params.scope || "", placeholder: "id glob, e.g. chat-*" });
  const limit = input("limit", { type: "number", min: 1, max: 100, value: params.limit || 10 });
  const stages = select("stages", [["hybrid", "hybrid"], ["vector", "vector only"], ["text", "full text only"]], params.stages || "hybrid");
  const halfLife = input("half_life_days", { type: "number", min: 0, step: "any", value: params.half_life_days || "", placeholder: "project default" });
  const bias = input("bias", { value: params.bias || "", placeholder: "id=weight, id=weight" });
  const depth = input("deep_follow_depth", { type: "number", min: 1, max: 100, value: 10 });
  const boxes = {
    include_parts: checkbox("Parts", "include_parts", true),
    include_versions: checkbox("Versions", "include_versions", false),
    include_hidden: checkbox("System notes", "include_hidden", false),
    include_self: checkbox("Include the similar_to note", "include_self", false),
    deep: checkbox("Deep (follow edges)", "deep", false),
  };
  const results = h("div", { id: "results", "aria-live": "polite" });
  const form = h(
    "form",
    { class: "playground", role: "search", "aria-label": "Find notes" },
    field("Query", query),
    field("Similar to", similar, "Exactly one of query and similar to"),
    field("Tags", tags, "key=value; every key must match"),
    field("Since", since, "ISO duration (P7D) or date"),
    field("Until", until),
    field("Id scope", scope),
    field("Limit", limit),
    field("Stages", stages),
    field("Recency half-life (days)", halfLife, "0 turns the recency bonus off"),
    field("Bias", bias, "0 excludes, below 1 demotes, above 1 boosts"),
    field("Deep follow depth", depth),
    h("fieldset", {}, h("legend", {}, "Include"), Object.values(boxes)),
    h("button", { type: "submit", id: "run-find" }, "Find"),
  );

  async function run() {
    const body = {
      limit: Number(limit.value) || 10,
      stages: stages.value,
      explain: true,
      deep_follow_depth: Number(depth.value) || 10,
    };
    if (query.value.trim()) body.query = query.value;
    if (similar.value.trim()) body.similar_to = similar.value.trim();
    if (tags.value.trim()) body.tags = parseTags(tags.value);
    if (since.value.trim()) body.since = since.value.trim();
    if (until.value.trim()) body.until = until.value.trim();
    if (scope.value.trim()) body.scope = scope.value.trim();
    if (halfLife.value !== "") body.half_life_days = Number(halfLife.value);
    if (bias.value.trim()) body.bias = parseBias(bias.value);
    for (const [name, box] of Object.entries(boxes)) body[name] = box.querySelector("input").checked;
    const found = await api("POST", "/v1/search", { body });
    const headers = ["#", "Id", "Summary", "Score", ...PARTS.map(([, label]) => label), "Bias"];
    const scale = found.notes.length && found.notes[0].explain ? found.notes[0].explain.scale : null;
    const groups = found.deep_groups.map((g) =>
      h("section", {}, h("h3", {}, `Reached from ${g.id}`), table(["Id", "Summary", "Closeness"],
        g.items.map((n) => h("tr", {}, h("td", {}, link(n.id, "note", { id: n.id })), h("td", {}, n.summary), h("td", { class: "num" }, number(n.score)))))),
    );
    replace(
      results,
      h("p", { role: "status" }, `${found.notes.length} results · mode ${found.mode}` +
        (found.pending_embedding ? ` · ${found.pending_embedding} notes not embedded yet` : "")),
      table(headers, found.notes.map((n, i) => resultRow(i + 1, n)), "Results, best first"),
      scale ? h("p", { class: "hint" }, `Score = min(1, (fusion + neighbour + episode + date + tag + recency) / ${scale.toFixed(2)} × bias). In hybrid mode fusion = 0.4 × full text (the note's share of the question's words, counted as far as the note is close in meaning) + 0.6 × vector; one stage alone is its own fusion. Context bonuses need evidence that notes belong together, and count only as far as the note itself matches.`) : null,
      groups,
    );
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    ctx.fail(null);
    run().catch(ctx.fail);
  });
  replace(main, h("h1", {}, "Search playground"), form, results);
  if (params.query || params.similar_to) await run();
}
