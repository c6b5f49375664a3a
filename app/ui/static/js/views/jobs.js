// Background work: pending, running and dead jobs with their errors; a dead
// job can be sent back to the queue (write scope).

import { api } from "../api.js";
import { field, h, input, link, replace, select, table, when } from "../dom.js";

const STATUSES = [["", "any"], ["pending", "pending"], ["dispatched", "dispatched"], ["running", "running"], ["dead", "dead"], ["done", "done"]];

function row(job, ctx, reload) {
  let action = null;
  if (job.status === "dead" && ctx.can("write")) {
    action = h("button", { type: "button", class: "retry", "aria-label": `Retry ${job.kind} job ${job.id}` }, "Retry");
    action.addEventListener("click", async () => {
      action.disabled = true;
      try {
        await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/retry`);
        ctx.notify(`Job ${job.id} sent back to the queue.`);
        await reload();
      } catch (err) {
        action.disabled = false;
        ctx.fail(err);
      }
    });
  }
  return h(
    "tr",
    { "data-job": job.id, "data-status": job.status },
    h("td", {}, job.kind),
    h("td", {}, job.note_id ? link(job.note_id, "note", { id: job.note_id }) : "–"),
    h("td", { class: `status ${job.status}` }, job.status),
    h("td", { class: "num" }, `${job.attempts}/${job.max_attempts}`),
    h("td", { class: "when" }, when(job.updated_at)),
    h("td", { class: "error" }, job.last_error || ""),
    h("td", {}, action),
  );
}

export async function render(main, params, ctx) {
  const status = select("status", STATUSES, params.status ?? "");
  const kind = input("kind", { value: params.kind || "", placeholder: "embed, fetch, summarize …" });
  const note = input("note_id", { value: params.note_id || "" });
  const form = h(
    "form",
    { class: "filters", "aria-label": "Filter jobs" },
    field("Status", status),
    field("Kind", kind),
    field("Note id", note),
    h("button", { type: "submit" }, "Apply"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = {};
    if (status.value) next.status = status.value;
    if (kind.value.trim()) next.kind = kind.value.trim();
    if (note.value.trim()) next.note_id = note.value.trim();
    ctx.go("jobs", next);
  });
  const body = h("div", { id: "jobs" });
  const refresh = h("button", { type: "button" }, "Refresh");
  async function reload() {
    const found = await api("GET", "/v1/jobs", {
      query: { status: params.status, kind: params.kind, note_id: params.note_id, limit: 100 },
    });
    replace(
      body,
      found.jobs.length
        ? table(["Kind", "Note", "Status", "Attempts", "Updated", "Last error", ""], found.jobs.map((j) => row(j, ctx, reload)), "Jobs, newest first")
        : h("p", {}, "No jobs match."),
    );
  }
  refresh.addEventListener("click", () => reload().catch(ctx.fail));
  replace(main, h("h1", {}, "Jobs"), form, refresh, body);
  await reload();
  return null;
}
