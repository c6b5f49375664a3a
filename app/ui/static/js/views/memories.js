// Memories: what keepmem believes (current, as of a time, or every belief
// including those superseded), filtered by user and subject; one memory's
// earlier wordings, the messages it came from and the history of its slot.
// Statements come from conversations: every one is a text node, never markup.

import { api, memoryUrl } from "../api.js";
import { checkbox, field, h, input, link, replace, table, when } from "../dom.js";

const LIMIT = 200;
const FILTERS = ["user_id", "subject", "as_of", "include_superseded"];

function state(m) {
  const said = m.current ? "current" : "superseded";
  return m.negated ? `${said} · retraction` : said;
}

function certainty(m) {
  const shown = m.certainty === "candidate" ? "candidate (unconfirmed)" : m.certainty;
  return `${shown} · ${Number(m.confidence).toFixed(2)}`;
}

// filters: the list's own (kept when a memory is opened)
function memoryRow(m, selected, filters) {
  return h(
    "tr",
    {
      "data-id": m.id,
      "data-state": m.current ? "current" : "superseded",
      class: selected ? "selected" : null,
      "aria-current": selected ? "true" : null,
    },
    h("td", { class: "summary statement" }, link(m.statement, "memories", { ...filters, id: m.id })),
    h("td", { class: "subject" }, m.subject),
    h("td", { class: "mono attribute" }, m.attribute),
    h("td", { class: "value" }, m.value),
    h("td", { class: "kind" }, m.kind),
    h("td", { class: "certainty" }, certainty(m)),
    h("td", { class: "state" }, state(m)),
    h("td", { class: "when" }, when(m.valid_at)),
  );
}

function filterForm(params, ctx) {
  const user = input("user_id", { value: params.user_id || "", placeholder: "alice" });
  const subject = input("subject", { value: params.subject || "", placeholder: "Alice" });
  const asOf = input("as_of", { value: params.as_of || "", placeholder: "2024-02-01 or 2024-02-01T10:00:00Z" });
  const superseded = checkbox("Include superseded", "include_superseded", params.include_superseded === "true");
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter memories" },
    field("User", user, "The user_id the messages were sent with"),
    field("Subject", subject, "Who or what the memory is about"),
    field("As of", asOf, "What was believed at that time (ISO-8601)"),
    superseded,
    h("button", { type: "submit" }, "Apply"),
  );
  const apply = () => {
    const next = {};
    for (const [name, el] of Object.entries({ user_id: user, subject, as_of: asOf })) {
      if (el.value.trim()) next[name] = el.value.trim();
    }
    if (superseded.querySelector("input").checked) next.include_superseded = "true";
    ctx.go("memories", next);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply();
  });
  // the toggle applies at once: it is the filter one flips back and forth
  superseded.querySelector("input").addEventListener("change", apply);
  return form;
}

function versionsPanel(d) {
  const items = d.versions.map((v) =>
    h(
      "li",
      { class: "version", "data-version": String(v.version) },
      h("span", { class: "when" }, when(v.at)),
      " ",
      h("span", { class: "statement" }, v.statement),
    ),
  );
  return h(
    "section",
    { "aria-labelledby": "versions-title", id: "memory-versions" },
    h("h2", { id: "versions-title" }, `Earlier wordings (${d.versions.length})`),
    items.length ? h("ol", { class: "plain" }, items) : h("p", {}, "None: it was never reworded."),
  );
}

function sourcesPanel(d) {
  const rows = d.source_messages.map((s) =>
    h(
      "tr",
      { "data-id": s.id },
      h("td", { class: "id" }, s.exists ? link(s.id, "note", { id: s.id }) : s.id),
      h("td", { class: "summary" }, s.exists ? s.summary : "(no longer stored)"),
      h("td", { class: "when" }, when(s.created_at)),
    ),
  );
  return h(
    "section",
    { "aria-labelledby": "sources-title", id: "memory-sources" },
    h("h2", { id: "sources-title" }, `Sources (${rows.length})`),
    rows.length
      ? table(["Message", "Said", "At"], rows, "The messages this memory came from")
      : h("p", {}, "None: written by the agent itself."),
  );
}

function historyPanel(d, filters) {
  const rows = d.history.map((m) =>
    h(
      "tr",
      {
        "data-id": m.id,
        "data-state": m.current ? "current" : "superseded",
        class: m.id === d.id ? "selected" : null,
        "aria-current": m.id === d.id ? "true" : null,
      },
      h("td", { class: "when" }, when(m.valid_at)),
      h("td", { class: "summary statement" }, m.id === d.id ? m.statement : link(m.statement, "memories", { ...filters, id: m.id })),
      h("td", { class: "value" }, m.value),
      h("td", { class: "state" }, state(m)),
      h("td", { class: "when" }, m.superseded_at ? when(m.superseded_at) : "–"),
    ),
  );
  return h(
    "section",
    { "aria-labelledby": "history-title", id: "memory-history" },
    h("h2", { id: "history-title" }, "History of its slot"),
    h("p", { class: "hint" }, "Every belief about this subject and attribute, oldest first: each is superseded by the next."),
    table(["Valid from", "Statement", "Value", "State", "Superseded at"], rows, "Beliefs of the same slot, oldest first"),
  );
}

async function detail(id, filters) {
  const d = await api("GET", memoryUrl(id));
  const replaced = d.superseded_by
    ? [`superseded at ${when(d.superseded_at)} by `, link(d.superseded_by, "memories", { ...filters, id: d.superseded_by })]
    : "current";
  return h(
    "section",
    { "aria-labelledby": "memory-title", id: "memory" },
    h("h2", { id: "memory-title", class: "mono" }, `Memory ${d.id}`),
    h("p", { class: "summary memory-statement" }, d.statement),
    h(
      "dl",
      { class: "meta" },
      h("dt", {}, "Subject"),
      h("dd", { class: "subject" }, d.subject),
      h("dt", {}, "Attribute"),
      h("dd", { class: "mono attribute" }, d.attribute),
      h("dt", {}, "Value"),
      h("dd", { class: "value" }, d.negated ? `not ${d.value}` : d.value),
      h("dt", {}, "Kind"),
      h("dd", {}, d.kind),
      h("dt", {}, "Certainty"),
      h("dd", { class: "certainty" }, certainty(d)),
      h("dt", {}, "State"),
      h("dd", { class: "state" }, replaced),
      h("dt", {}, "Valid from"),
      h("dd", {}, when(d.valid_at)),
      h("dt", {}, "Thread"),
      h("dd", { class: "mono" }, d.thread_id || "–"),
      h("dt", {}, "User"),
      h("dd", {}, d.user_id || "–"),
      h("dt", {}, "Agent"),
      h("dd", {}, d.agent_id || "–"),
      h("dt", {}, "Note"),
      h("dd", {}, link(d.id, "note", { id: d.id })),
    ),
    versionsPanel(d),
    sourcesPanel(d),
    historyPanel(d, filters),
  );
}

export async function render(main, params, ctx) {
  const filters = Object.fromEntries(FILTERS.filter((k) => params[k]).map((k) => [k, params[k]]));
  let found = { memories: [] };
  try {
    found = await api("GET", "/v1/memories", {
      query: { user_id: params.user_id, subject: params.subject, as_of: params.as_of, include_superseded: params.include_superseded, limit: LIMIT },
    });
  } catch (err) {
    ctx.fail(err); // a bad "as of", say: the form stays to correct it
  }
  const rows = found.memories.map((m) => memoryRow(m, m.id === params.id, filters));
  const what = params.include_superseded === "true" ? "Every memory, current or superseded" : params.as_of ? `Believed as of ${params.as_of}` : "Current memories";
  const list = h(
    "div",
    { id: "memories" },
    h("p", { class: "count", role: "status" }, rows.length ? `${rows.length} memories` : ""),
    rows.length
      ? table(["Statement", "Subject", "Attribute", "Value", "Kind", "Certainty", "State", "Valid from"], rows, `${what}, newest first`)
      : h("p", {}, "No memories match: they are formed from messages sent to a thread, or written with remember."),
  );
  let chosen = null;
  if (params.id) {
    try {
      chosen = await detail(params.id, filters);
    } catch (err) {
      ctx.fail(err); // the list still stands
    }
  }
  replace(main, h("h1", {}, "Memories"), filterForm(params, ctx), list, chosen);
  if (chosen) chosen.scrollIntoView({ block: "start" });
  return null;
}
