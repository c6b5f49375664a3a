// Sessions: the project's coding-agent sessions (newest activity first), one
// session's timeline (paged, by kind) and checkpoints, its capture and
// injection switches (write scope), and the patterns that recur across them.

import { api, sessionUrl } from "../api.js";
import { field, h, input, link, replace, select, table, tagList, when } from "../dom.js";
import { pagerButtons } from "./common.js";

const PAGE = 25;
const TIMELINE_KINDS = [
  ["", "any"],
  ["prompt", "prompt"],
  ["tool_result", "tool result"],
  ["tool_failure", "tool failure"],
  ["tool_use", "tool use"],
  ["subagent_start", "subagent start"],
  ["subagent_stop", "subagent stop"],
  ["stop", "stop"],
  ["notification", "notification"],
  ["pre_compact", "pre compact"],
  ["post_compact", "post compact"],
  ["session_start", "session start"],
  ["session_end", "session end"],
  ["observation", "observation"],
  ["checkpoint", "checkpoint"],
];
const PATTERN_KINDS = [["", "any"], ["error", "errors"], ["fix", "fixes"], ["decision", "decisions"], ["preference", "preferences"]];
const SHOWN_SESSIONS = 10; // of a pattern's sessions, linked
// a timeline item's tags that its row already says
const SAID = new Set(["session", "event", "kind", "platform"]);

const onOff = (value) => (value ? "on" : "off");

function counts(map) {
  const parts = Object.entries(map || {}).map(([kind, n]) => `${kind} ${n}`);
  return parts.length ? parts.join(", ") : "none";
}

// params: the list's own filters (another session's timeline starts afresh)
function sessionRow(s, selected, params) {
  return h(
    "tr",
    { "data-session": s.session_id, class: selected ? "selected" : null, "aria-current": selected ? "true" : null },
    h("td", { class: "id" }, link(s.session_id, "sessions", { ...params, id: s.session_id })),
    h("td", { class: "platform" }, s.platform),
    h("td", { class: "mono cwd" }, s.cwd),
    h("td", { class: "when" }, when(s.last_event_at)),
    h("td", { class: "num" }, String(s.events)),
    h("td", { class: "num" }, String(s.checkpoints)),
    h("td", { class: "summary" }, s.summary),
    h("td", { class: "capture" }, onOff(s.capture)),
    h("td", { class: "inject" }, onOff(s.inject)),
  );
}

function patternRow(p) {
  const shown = p.session_ids.slice(0, SHOWN_SESSIONS);
  const more = p.session_ids.length - shown.length;
  return h(
    "tr",
    { "data-kind": p.kind },
    h("td", {}, p.kind),
    h(
      "td",
      { class: "summary" },
      h("span", { class: "template" }, p.template),
      p.example && p.example !== p.template ? h("small", { class: "hint example" }, `e.g. ${p.example}`) : null,
    ),
    h("td", { class: "num count" }, String(p.count)),
    h(
      "td",
      { class: "sessions" },
      h("span", { class: "num" }, String(p.sessions)),
      h("ul", { class: "plain" }, shown.map((sid) => h("li", {}, link(sid, "sessions", { id: sid })))),
      more > 0 ? h("small", { class: "hint" }, `and ${more} more`) : null,
    ),
    h("td", { class: "files" }, p.files.length ? h("ul", { class: "plain mono" }, p.files.map((f) => h("li", {}, f))) : "–"),
    h("td", { class: "when" }, when(p.last_seen)),
  );
}

async function patternsPanel(params, ctx) {
  const kind = select("pattern_kind", PATTERN_KINDS, params.pattern_kind || "");
  const form = h(
    "form",
    { class: "inline", "aria-label": "Filter patterns" },
    field("Pattern kind", kind),
    h("button", { type: "submit" }, "Show"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = { ...params };
    if (kind.value) next.pattern_kind = kind.value;
    else delete next.pattern_kind;
    ctx.go("sessions", next);
  });
  const found = await api("GET", "/v1/sessions/patterns", {
    query: { kind: params.pattern_kind, limit: 100 },
  });
  return h(
    "section",
    { "aria-labelledby": "patterns-title", id: "patterns" },
    h("h2", { id: "patterns-title" }, "Patterns"),
    h("p", { class: "hint" }, "Errors, fixes and decisions that recur across this project's sessions, most widespread first."),
    form,
    found.patterns.length
      ? table(["Kind", "Pattern", "Count", "Sessions", "Files", "Last seen"], found.patterns.map(patternRow), "Recurring patterns")
      : h("p", {}, "No recurring patterns (yet)."),
  );
}

function switches(s, ctx, listRow) {
  const boxes = {
    capture: h("input", { type: "checkbox", name: "capture", checked: s.capture, disabled: !ctx.can("write") }),
    inject: h("input", { type: "checkbox", name: "inject", checked: s.inject, disabled: !ctx.can("write") }),
  };
  const said = { capture: "Capture", inject: "Injection" };
  for (const [name, box] of Object.entries(boxes)) {
    box.addEventListener("change", async () => {
      const wanted = box.checked;
      box.disabled = true;
      try {
        const now = await api("PATCH", sessionUrl(s.session_id), { body: { [name]: wanted } });
        for (const [n, b] of Object.entries(boxes)) b.checked = now[n];
        if (listRow) {
          replace(listRow.querySelector("td.capture"), onOff(now.capture));
          replace(listRow.querySelector("td.inject"), onOff(now.inject));
        }
        ctx.notify(`${said[name]} ${onOff(now[name])} for session ${s.session_id}.`);
      } catch (err) {
        box.checked = !wanted;
        ctx.fail(err);
      } finally {
        box.disabled = false;
      }
    });
  }
  return h(
    "fieldset",
    { class: "switches" },
    h("legend", {}, "For this session"),
    field("Capture its events", boxes.capture),
    field("Inject resume context", boxes.inject),
    ctx.can("write") ? null : h("small", { class: "hint" }, "Changing these needs a key with the write scope."),
  );
}

function timelinePanel(s, params, ctx) {
  const kind = select("kind", TIMELINE_KINDS, params.kind || "");
  const form = h(
    "form",
    { class: "inline", "aria-label": "Filter the timeline" },
    field("Kind", kind),
    h("button", { type: "submit" }, "Show"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = { ...params };
    if (kind.value) next.kind = kind.value;
    else delete next.kind;
    ctx.go("sessions", next);
  });
  const body = h("tbody", {});
  const list = table(["At", "Kind", "Summary", "Tags"], [], "Events, observations and checkpoints, oldest first");
  list.querySelector("tbody").replaceWith(body);
  const count = h("p", { class: "count", role: "status" });
  const pager = h("div", { class: "pager" });
  const cursors = [];
  let current = null;

  async function load(cursor) {
    const page = await api("GET", sessionUrl(s.session_id, "/timeline"), {
      query: { kind: params.kind, limit: PAGE, cursor },
    });
    current = cursor;
    replace(
      body,
      page.items.map((item) =>
        h(
          "tr",
          { "data-id": item.id, "data-kind": item.kind },
          h("td", { class: "when" }, when(item.at)),
          h("td", { class: "kind" }, item.kind),
          h("td", { class: "summary" }, item.summary),
          h("td", { class: "tags" }, tagList(Object.fromEntries(Object.entries(item.tags || {}).filter(([k]) => !SAID.has(k))))),
        ),
      ),
    );
    replace(count, page.items.length ? `${page.items.length} items on this page` : "Nothing on the timeline matches.");
    replace(pager, ...pagerButtons(cursors, current, page.next_cursor, load, ctx.fail));
  }

  const section = h(
    "section",
    { "aria-labelledby": "timeline-title", id: "timeline" },
    h("h2", { id: "timeline-title" }, "Timeline"),
    form,
    count,
    list,
    pager,
  );
  return { section, load };
}

function checkpointsPanel(found) {
  const items = found.checkpoints.map((cp) =>
    h(
      "li",
      { class: "checkpoint", "data-id": cp.id },
      h("span", { class: "kind" }, cp.trigger || "checkpoint"),
      " ",
      h("span", { class: "when" }, when(cp.at)),
      h("p", { class: "checkpoint-text" }, cp.text),
    ),
  );
  return h(
    "section",
    { "aria-labelledby": "checkpoints-title", id: "checkpoints" },
    h("h2", { id: "checkpoints-title" }, `Checkpoints (${found.checkpoints.length})`),
    items.length ? h("ol", { class: "checkpoints" }, items) : h("p", {}, "No checkpoints yet."),
  );
}

async function detail(id, params, ctx, listRow) {
  const [s, cps] = await Promise.all([
    api("GET", sessionUrl(id)),
    api("GET", sessionUrl(id, "/checkpoints")),
  ]);
  const timeline = timelinePanel(s, params, ctx);
  const out = h(
    "section",
    { "aria-labelledby": "session-title", id: "session" },
    h("h2", { id: "session-title", class: "mono" }, `Session ${s.session_id}`),
    h(
      "dl",
      { class: "meta" },
      h("dt", {}, "Platform"),
      h("dd", {}, s.platform),
      h("dt", {}, "Working directory"),
      h("dd", { class: "mono" }, s.cwd || "–"),
      h("dt", {}, "Started"),
      h("dd", {}, when(s.started_at)),
      h("dt", {}, "Last activity"),
      h("dd", {}, when(s.last_event_at)),
      h("dt", {}, "Ended"),
      h("dd", {}, s.ended_at ? `${when(s.ended_at)}${s.end_reason ? ` (${s.end_reason})` : ""}` : "–"),
      h("dt", {}, "Events"),
      h("dd", {}, `${s.events}: ${counts(s.counts)}`),
    ),
    h("p", { class: "summary session-summary" }, s.summary),
    switches(s, ctx, listRow),
    timeline.section,
    checkpointsPanel(cps),
  );
  await timeline.load(null);
  return out;
}

export async function render(main, params, ctx) {
  const cwd = input("cwd", { value: params.cwd || "", placeholder: "/home/dev/project" });
  const form = h(
    "form",
    { class: "inline", "aria-label": "Filter sessions" },
    field("Working directory", cwd, "Only sessions started in this directory"),
    h("button", { type: "submit" }, "Apply"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = {};
    if (cwd.value.trim()) next.cwd = cwd.value.trim();
    ctx.go("sessions", next);
  });
  const base = { ...params };
  delete base.kind;
  delete base.id;
  const [found, patterns] = await Promise.all([
    api("GET", "/v1/sessions", { query: { limit: 100, cwd: params.cwd } }),
    patternsPanel(params, ctx),
  ]);
  const rows = found.sessions.map((s) => sessionRow(s, s.session_id === params.id, base));
  const list = h(
    "div",
    { id: "sessions" },
    rows.length
      ? table(
          ["Session", "Platform", "Working directory", "Last activity", "Events", "Checkpoints", "Summary", "Capture", "Inject"],
          rows,
          "Sessions, most recently active first",
        )
      : h("p", {}, "No sessions yet: they appear once an agent's hooks send events."),
  );
  const chosen = params.id
    ? await detail(params.id, params, ctx, rows.find((r) => r.dataset.session === params.id) || null)
    : null;
  replace(main, h("h1", {}, "Sessions"), form, list, chosen, patterns);
  if (chosen) chosen.scrollIntoView({ block: "start" });
  return null;
}
