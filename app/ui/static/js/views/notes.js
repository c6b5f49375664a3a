// Notes: filters (id prefix, tags, since / until), cursor paging, new
// writes arriving live at the top of the first page, and (write keys) a
// form for a new note.

import { api } from "../api.js";
import { checkbox, field, h, input, replace, select, table } from "../dom.js";
import { noteRow, pagerButtons, tagQuery } from "./common.js";
import { newNoteForm } from "./noteedit.js";

const HEADERS = ["Id", "Summary", "Tags", "Updated"];

export async function render(main, params, ctx) {
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter notes" });
  const prefix = input("prefix", { value: params.prefix || "", placeholder: "id prefix or glob" });
  const tags = input("tags", { value: params.tags || "", placeholder: "key=value, key=value" });
  const since = input("since", { value: params.since || "", placeholder: "P7D or 2026-01-01" });
  const until = input("until", { value: params.until || "", placeholder: "P1D or 2026-02-01" });
  const order = select(
    "order_by",
    [["updated", "Updated"], ["created", "Created"], ["accessed", "Accessed"], ["id", "Id"]],
    params.order_by || "updated",
  );
  const hidden = checkbox("Include system notes", "include_hidden", params.include_hidden === "true");
  form.append(
    field("Id prefix", prefix),
    field("Tags", tags, "key=value, comma separated; all must match"),
    field("Since", since, "ISO duration or date"),
    field("Until", until),
    field("Order", order),
    hidden,
    h("button", { type: "submit" }, "Apply"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = {};
    for (const [name, el] of Object.entries({ prefix, tags, since, until })) {
      if (el.value.trim()) next[name] = el.value.trim();
    }
    if (order.value !== "updated") next.order_by = order.value;
    if (hidden.querySelector("input").checked) next.include_hidden = "true";
    ctx.go("notes", next);
  });

  const body = h("tbody", {});
  const list = table(HEADERS, [], "Notes");
  list.querySelector("tbody").replaceWith(body);
  const pager = h("div", { class: "pager" });
  const count = h("p", { class: "count", role: "status" });
  const cursors = [];
  let current = null;

  async function load(cursor) {
    const query = {
      prefix: params.prefix,
      tag: params.tags ? tagQuery(params.tags) : [],
      since: params.since,
      until: params.until,
      order_by: params.order_by,
      include_hidden: params.include_hidden,
      limit: 25,
      cursor,
    };
    const page = await api("GET", "/v1/notes", { query });
    current = cursor;
    replace(body, page.notes.map((n) => noteRow(n)));
    replace(count, page.notes.length ? `${page.notes.length} notes on this page` : "No notes match.");
    replace(pager, ...pagerButtons(cursors, current, page.next_cursor, load, ctx.fail));
  }

  const create = ctx.can("write") ? newNoteForm(ctx) : null;
  replace(main, h("h1", {}, "Notes"), create, form, count, list, pager);
  await load(null);

  const filtered = ["prefix", "tags", "since", "until", "order_by"].some((k) => params[k]);
  return ctx.onEvent((event) => {
    if (filtered || current !== null || event.kind !== "put" || event.note_id.startsWith(".")) return;
    const old = body.querySelector(`tr[data-id="${CSS.escape(event.note_id)}"]`);
    if (old) old.remove();
    const row = noteRow({ id: event.note_id, summary: event.summary || "", tags: event.tags, updated_at: event.at });
    row.classList.add("fresh");
    body.prepend(row);
  });
}
