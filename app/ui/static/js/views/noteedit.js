// Writing notes from the dashboard (write keys only): a new note, a new
// version of one (its text and summary), and deleting one after a confirm
// step. Each calls the notes API a script would call: POST /v1/notes puts,
// DELETE /v1/notes/{id} deletes with the history.

import { api, noteUrl } from "../api.js";
import { field, h, input } from "../dom.js";
import { formError, parseTags } from "./common.js";

function textarea(name, attrs, text) {
  const el = h("textarea", { name, rows: 6, ...attrs });
  el.value = text || "";
  return el;
}

// The "New note" form for the notes list; opens the note once stored.
export function newNoteForm(ctx) {
  const content = textarea("new-content", { required: true });
  const id = input("new-id", { placeholder: "left empty: % + a hash of the text" });
  const tags = input("new-tags", { placeholder: "key=value, key=value" });
  const error = formError("new-note-error");
  const form = h(
    "form",
    { class: "editor", "aria-label": "New note" },
    field("Text", content),
    field("Id", id, "Optional; an existing id gets a new version"),
    field("Tags", tags, "key=value, comma separated"),
    h("button", { type: "submit" }, "Create note"),
    error.el,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = { content: content.value };
      if (id.value.trim()) body.id = id.value.trim();
      const parsed = parseTags(tags.value);
      if (Object.keys(parsed).length) body.tags = parsed;
      const made = await api("POST", "/v1/notes", { body });
      ctx.go("note", { id: made.id });
    } catch (err) {
      error.show(err);
    }
  });
  return h(
    "details",
    { id: "new-note" },
    h("summary", {}, "New note"),
    form,
  );
}

// Edit (a new version: the old one stays in the history) and delete.
// The API hands back summaries, not texts: the text box starts with the
// summary, which is the whole text of a short note.
export function noteEditor(note, ctx, { reload, deleted }) {
  const content = textarea("edit-content", { required: true }, note.summary);
  const summary = input("edit-summary", { placeholder: "left empty: made from the text" });
  const error = formError("edit-error");
  const form = h(
    "form",
    { class: "editor", "aria-label": "Edit this note" },
    field("Text", content, "Saving stores a new version. This box starts with the summary: paste a long note's whole text."),
    field("Summary", summary, "Optional"),
    h("button", { type: "submit" }, "Save new version"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.clear();
    try {
      const body = { id: note.id, content: content.value };
      if (summary.value.trim()) body.summary = summary.value.trim();
      const saved = await api("POST", "/v1/notes", { body });
      ctx.notify(saved.changed === false ? "Nothing changed." : "Saved a new version.");
      await reload();
    } catch (err) {
      error.show(err);
    }
  });

  const remove = h("button", { type: "button", id: "delete-note", class: "danger" }, "Delete note");
  const cancel = h("button", { type: "button", id: "delete-cancel", hidden: true }, "Cancel");
  const disarm = () => {
    delete remove.dataset.armed;
    remove.textContent = "Delete note";
    cancel.hidden = true;
  };
  cancel.addEventListener("click", disarm);
  remove.addEventListener("click", async () => {
    error.clear();
    if (remove.dataset.armed !== "yes") {
      remove.dataset.armed = "yes";
      remove.textContent = "Confirm delete (with its history)";
      cancel.hidden = false;
      return;
    }
    try {
      await api("DELETE", noteUrl(note.id));
      deleted();
    } catch (err) {
      disarm();
      error.show(err);
    }
  });
  return h(
    "section",
    { "aria-labelledby": "edit-title", id: "edit" },
    h("h2", { id: "edit-title" }, "Edit"),
    form,
    h("p", { class: "actions" }, remove, " ", cancel),
    error.el,
  );
}
