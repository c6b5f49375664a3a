// Live: the project's events as they happen (puts, tags, deletes, summaries,
// embeddings, failures), newest first.

import { h, link, replace, tagList, when } from "../dom.js";

const KEEP = 200;

export async function render(main, params, ctx) {
  const list = h("ol", { id: "events", class: "events", reversed: true, "aria-live": "polite", "aria-relevant": "additions" });
  const empty = h("p", { class: "hint" }, "Waiting for writes… new events appear here as they happen.");
  replace(main, h("h1", {}, "Live"), empty, list);
  return ctx.onEvent((event) => {
    empty.hidden = true;
    const item = h(
      "li",
      { class: `event ${event.kind}`, "data-kind": event.kind, "data-note": event.note_id },
      h("span", { class: "kind" }, event.kind),
      " ",
      link(event.note_id, "note", { id: event.note_id }),
      " ",
      h("span", { class: "when" }, when(event.at)),
      event.summary ? h("p", { class: "summary" }, event.summary) : null,
      tagList(event.tags),
    );
    list.prepend(item);
    while (list.children.length > KEEP) list.lastElementChild.remove();
  });
}
