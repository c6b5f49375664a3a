// Pieces several views share: tag filters typed as text, a note's row, an
// error shown beside its form.

import { h, link, replace, tagList, when } from "../dom.js";

// Previous / next buttons over a cursor-paged list: ``cursors`` is the
// stack of cursors of the pages before, ``current`` this page's cursor.
export function pagerButtons(cursors, current, nextCursor, load, fail) {
  const prev = h("button", { type: "button", disabled: cursors.length === 0 }, "Previous page");
  const next = h("button", { type: "button", disabled: !nextCursor }, "Next page");
  prev.addEventListener("click", () => load(cursors.pop()).catch(fail));
  next.addEventListener("click", () => {
    cursors.push(current);
    load(nextCursor).catch(fail);
  });
  return [prev, next];
}

// "topic=sea, speaker=Melanie" -> {topic: ["sea"], speaker: ["Melanie"]}
export function parseTags(text) {
  const out = {};
  for (const item of String(text || "").split(/[,\n]/)) {
    const trimmed = item.trim();
    if (!trimmed) continue;
    const at = trimmed.indexOf("=");
    if (at <= 0) throw new Error(`tag filter "${trimmed}" must be key=value`);
    const key = trimmed.slice(0, at).trim();
    (out[key] = out[key] || []).push(trimmed.slice(at + 1).trim());
  }
  return out;
}

export function tagQuery(text) {
  return Object.entries(parseTags(text)).flatMap(([key, values]) => values.map((v) => `${key}=${v}`));
}

export function noteRow(note, extra = []) {
  return h(
    "tr",
    { "data-id": note.id },
    h("td", { class: "id" }, link(note.id, "note", { id: note.id })),
    h("td", { class: "summary" }, note.summary),
    h("td", {}, tagList(note.tags)),
    h("td", { class: "when" }, when(note.updated_at)),
    extra,
  );
}

// A refusal shown beside the form that caused it: the page's alert sits at
// the top, out of view of a form further down.
export function formError(id) {
  const el = h("p", { id, role: "alert", class: "error form-error", hidden: true });
  return {
    el,
    show(err) {
      replace(el, `${err.message}${err.requestId ? ` (request ${err.requestId})` : ""}`);
      el.hidden = false;
      el.scrollIntoView({ block: "nearest" });
    },
    clear() {
      replace(el);
      el.hidden = true;
    },
  };
}
