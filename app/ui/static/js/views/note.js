// One note: summary, tags (editable with the write scope), versions with a
// diff between any two, passages (parts with their spans and pages) and
// citations (verified on request), entities and relations, pending work;
// with the write scope, a new version of its text, or deleting it.

import { api, noteUrl } from "../api.js";
import { field, h, input, link, replace, table, when } from "../dom.js";
import { diffView } from "./diff.js";
import { noteEditor } from "./noteedit.js";
import { citations, passages } from "./passages.js";

function tagEditor(note, ctx, reload) {
  const rows = [];
  const system = Object.entries(note.tags || {}).filter(([key]) => key.startsWith("_"));
  for (const [key, value] of Object.entries(note.tags || {})) {
    if (key.startsWith("_")) continue; // kept by keepmem, not editable
    for (const v of Array.isArray(value) ? value : [value]) {
      const remove = h("button", { type: "button", "aria-label": `Remove tag ${key}=${v}` }, "Remove");
      remove.hidden = !ctx.can("write");
      remove.addEventListener("click", async () => {
        try {
          await api("PATCH", noteUrl(note.id, "/tags"), { body: { remove_values: { [key]: v } } });
          await reload();
        } catch (err) {
          ctx.fail(err);
        }
      });
      rows.push(h("tr", {}, h("td", {}, key), h("td", { class: "value" }, v), h("td", {}, remove)));
    }
  }
  const out = [rows.length ? table(["Key", "Value", ""], rows, "Tags") : h("p", {}, "No tags.")];
  if (ctx.can("write")) {
    const key = input("tag-key", { required: true });
    const value = input("tag-value", { required: true });
    const form = h(
      "form",
      { class: "inline", "aria-label": "Add a tag" },
      field("Tag key", key),
      field("Tag value", value),
      h("button", { type: "submit" }, "Add tag"),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api("PATCH", noteUrl(note.id, "/tags"), { body: { set: { [key.value.trim()]: value.value } } });
        ctx.notify(`Tag ${key.value.trim()} added.`);
        await reload();
      } catch (err) {
        ctx.fail(err);
      }
    });
    out.push(form);
  }
  out.push(
    h(
      "details",
      {},
      h("summary", {}, `System tags (${system.length})`),
      table(["Key", "Value"], system.map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", { class: "value" }, String(v)))), "Kept by keepmem"),
    ),
  );
  return h("section", { "aria-labelledby": "tags-title" }, h("h2", { id: "tags-title" }, "Tags"), out);
}

function versions(note, history) {
  // Offset 0 is the current text; 1 the previous version, and so on.
  const texts = new Map([[0, { summary: note.summary, date: note.updated_at }]]);
  for (const v of history.versions) texts.set(v.offset, v);
  const options = [...texts.keys()].map((offset) =>
    h("option", { value: offset }, offset === 0 ? "current" : `@V{${offset}} · ${when(texts.get(offset).date)}`),
  );
  const from = h("select", { id: "diff-from" }, options.map((o) => o.cloneNode(true)));
  const to = h("select", { id: "diff-to" }, options);
  from.value = String(Math.min(1, texts.size - 1));
  to.value = "0";
  const out = h("div", { id: "diff", "aria-live": "polite" });
  const show = () =>
    replace(out, diffView(texts.get(Number(from.value)).summary, texts.get(Number(to.value)).summary));
  from.addEventListener("change", show);
  to.addEventListener("change", show);
  show();
  const rows = history.versions.map((v) =>
    h(
      "tr",
      {},
      h("td", {}, link(`@V{${v.offset}}`, "note", { id: `${note.id}@V{${v.offset}}` })),
      h("td", { class: "when" }, when(v.date)),
      h("td", { class: "summary" }, v.summary),
    ),
  );
  return h(
    "section",
    { "aria-labelledby": "versions-title", id: "versions" },
    h("h2", { id: "versions-title" }, `Versions (${history.count} earlier)`),
    history.count ? table(["Version", "Date", "Summary"], rows, "Earlier versions, newest first") : h("p", {}, "No earlier versions."),
    history.count ? h("div", { class: "inline" }, field("Compare", from), field("with", to)) : null,
    history.count ? out : null,
  );
}

function entities(graph) {
  const ents = graph.entities.map((e) =>
    h("li", {}, link(e.name, "graph", { entity: e.key }), ` (${e.kind})`),
  );
  const rels = graph.relations.map((r) =>
    h("tr", {}, h("td", {}, r.subject), h("td", {}, r.predicate), h("td", {}, r.object)),
  );
  return h(
    "section",
    { "aria-labelledby": "entities-title", id: "entities" },
    h("h2", { id: "entities-title" }, "Entities and relations"),
    ents.length ? h("ul", { class: "entities" }, ents) : h("p", {}, "No entities extracted (yet)."),
    rels.length ? table(["Subject", "Relation", "Object"], rels, "Relations") : null,
  );
}

function pending(note, jobs) {
  const open = jobs.jobs.filter((j) => !["done", "superseded"].includes(j.status));
  const rows = open.map((j) =>
    h("tr", {}, h("td", {}, j.kind), h("td", {}, j.status), h("td", {}, String(j.attempts)), h("td", { class: "error" }, j.last_error || "")),
  );
  return h(
    "section",
    { "aria-labelledby": "pending-title", id: "pending" },
    h("h2", { id: "pending-title" }, "Pending work"),
    note.pending.length ? h("p", {}, `Waiting for: ${note.pending.join(", ")}`) : h("p", {}, "Nothing pending."),
    rows.length ? table(["Job", "Status", "Attempts", "Last error"], rows, "Open jobs") : null,
    link("All jobs of this note", "jobs", { note_id: note.id }),
  );
}

// The live listener of the page shown: a reload after the page's own write
// replaces it, so that write is not announced as a change from elsewhere.
let listening = null;

export async function render(main, params, ctx) {
  const id = params.id;
  if (!id) throw new Error("no note id");
  if (listening) listening();
  listening = null;
  const reload = () => render(main, params, ctx);
  const deleted = () => {
    if (listening) listening();
    replace(
      main,
      h("h1", { class: "note-id" }, id),
      h("p", { id: "deleted", role: "status" }, `Note ${id} was deleted with its history.`),
      link("Back to the notes", "notes"),
    );
  };
  const note = await api("GET", noteUrl(id));
  const base = id.includes("@") ? null : id;
  const [history, partList, graph, jobs, cited] = base
    ? await Promise.all([
        api("GET", noteUrl(id, "/versions"), { query: { limit: 50 } }),
        api("GET", noteUrl(id, "/parts")),
        api("GET", noteUrl(id, "/entities")),
        api("GET", "/v1/jobs", { query: { note_id: id, limit: 20 } }),
        api("GET", "/v1/citations", { query: { note: id, limit: 50 } }),
      ])
    : [null, null, null, null, null];
  replace(
    main,
    h("h1", { class: "note-id" }, note.id),
    h(
      "p",
      { class: "actions" },
      base ? link("Graph around this note", "graph", { note: id }, { id: "open-graph" }) : null,
      base ? " · " : null,
      base ? link("Find similar", "search", { similar_to: id }) : null,
    ),
    h("dl", { class: "meta" }, h("dt", {}, "Created"), h("dd", {}, when(note.created_at)), h("dt", {}, "Updated"), h("dd", {}, when(note.updated_at))),
    h("section", { "aria-labelledby": "summary-title" }, h("h2", { id: "summary-title" }, "Summary"), h("p", { class: "note-summary" }, note.summary)),
    base ? tagEditor(note, ctx, reload) : null,
    base && ctx.can("write") ? noteEditor(note, ctx, { reload, deleted }) : null,
    base ? pending(note, jobs) : null,
    base ? versions(note, history) : null,
    base ? passages(partList) : null,
    base ? citations(cited, ctx) : null,
    base ? entities(graph) : null,
  );
  const shown = JSON.stringify([note.summary, note.tags, note.updated_at]);
  let active = true;
  const off = ctx.onEvent(async (event) => {
    if (event.note_id !== base || event.kind === "embedding") return;
    if (event.kind === "delete") {
      ctx.notify("This note was deleted elsewhere.");
      return;
    }
    try {
      const now = await api("GET", noteUrl(id));
      if (JSON.stringify([now.summary, now.tags, now.updated_at]) === shown) return;
    } catch {
      // deleted, or out of reach: either way the page is stale
    }
    if (active) ctx.notify("This note changed: reload to see it.");
  });
  listening = () => {
    active = false;
    off();
  };
  return listening;
}
