// A note's passages (the parts a long document is cut into, each with its
// span of the text and where in the document it came from) and the
// citations of the note, each checked against the text on request.

import { api } from "../api.js";
import { h, link, replace, table, when } from "../dom.js";

// 75.5 -> "1:15.5": a cue's time as a person reads it
function clock(seconds) {
  const s = Number(seconds);
  if (!Number.isFinite(s)) return String(seconds);
  const whole = Math.floor(s);
  const rest = Math.round((s - whole) * 10) / 10;
  const hours = Math.floor(whole / 3600);
  const minutes = Math.floor((whole % 3600) / 60);
  const secs = String(whole % 60).padStart(2, "0") + (rest ? String(rest).slice(1) : "");
  return hours ? `${hours}:${String(minutes).padStart(2, "0")}:${secs}` : `${minutes}:${secs}`;
}

function range(first, last) {
  return last !== undefined && last !== null && String(last) !== String(first) ? `${first}–${last}` : String(first);
}

// Where a span came from, from a locator ({page, page_end, slide, sheet,
// start_s, end_s}) or a passage's tags (the same keys with a leading "_").
export function where(locator) {
  const get = (key) => (locator[key] !== undefined ? locator[key] : locator[`_${key}`]);
  const out = [];
  if (get("page") !== undefined) out.push(`page ${range(get("page"), get("page_end"))}`);
  if (get("slide") !== undefined) out.push(`slide ${range(get("slide"), get("slide_end"))}`);
  if (get("sheet") !== undefined) out.push(`sheet ${get("sheet")}`);
  if (get("start_s") !== undefined) {
    const end = get("end_s");
    out.push(end !== undefined ? `${clock(get("start_s"))}–${clock(end)}` : clock(get("start_s")));
  }
  return out.join(", ");
}

function span(start, end) {
  return start === undefined || start === null ? "" : `${start}–${end}`;
}

export function passages(list) {
  const rows = list.parts.map((p) => {
    const tags = p.tags || {};
    return h(
      "tr",
      { "data-id": p.id },
      h("td", { class: "num" }, link(String(tags._part_num || ""), "note", { id: p.id }, { "aria-label": `Open ${p.id}` })),
      h("td", { class: "span mono" }, span(tags._span_start, tags._span_end)),
      h("td", { class: "where" }, where(tags)),
      h("td", { class: "summary" }, p.summary),
    );
  });
  return h(
    "section",
    { "aria-labelledby": "parts-title", id: "passages" },
    h("h2", { id: "parts-title" }, `Passages (${list.count})`),
    list.count
      ? table(["No.", "Span", "Where", "Summary"], rows, "Parts of the note: character span of its text, and where in the document")
      : h("p", {}, "No passages: the note is whole."),
  );
}

function verdictText(verdict) {
  return verdict.status === "valid" ? "valid" : `${verdict.status}: ${verdict.diagnosis}`;
}

function citationRow(c, ctx) {
  const status = h("td", { class: "status", "aria-live": "polite" }, "not checked");
  const verify = h("button", { type: "button", class: "verify", "aria-label": `Verify citation ${c.id}` }, "Verify");
  verify.addEventListener("click", async () => {
    verify.disabled = true;
    replace(status, "checking…");
    try {
      const verdict = await api("POST", `/v1/citations/${encodeURIComponent(c.id)}/verify`);
      replace(status, verdictText(verdict));
      status.dataset.status = verdict.status;
    } catch (err) {
      replace(status, "");
      ctx.fail(err);
    } finally {
      verify.disabled = false;
    }
  });
  return h(
    "tr",
    { "data-id": c.id },
    h("td", { class: "quote" }, h("q", {}, c.quote)),
    h("td", { class: "span mono" }, span(c.start, c.end)),
    h("td", { class: "where" }, [c.part ? `passage ${c.part}` : "", where(c.locator || {})].filter(Boolean).join(", ")),
    h("td", { class: "num" }, String(c.version)),
    h("td", { class: "when" }, when(c.created_at)),
    status,
    h("td", {}, verify),
  );
}

export function citations(list, ctx) {
  const rows = list.citations.map((c) => citationRow(c, ctx));
  return h(
    "section",
    { "aria-labelledby": "citations-title", id: "citations" },
    h("h2", { id: "citations-title" }, `Citations (${rows.length}${list.next_cursor ? "+" : ""})`),
    rows.length
      ? table(["Quote", "Span", "Where", "Version", "Cited", "Status", ""], rows, "Citations of this note, newest first")
      : h("p", {}, "No citations of this note."),
  );
}
