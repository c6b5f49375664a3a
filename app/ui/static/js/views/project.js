// Project: the project's settings (GET /v1/settings; changed with PATCH by
// an admin key, read-only for others) and its tag rules and edge tags
// (tagrules.js). The form is built from the settings the API returns, so a
// setting added there shows here with its JSON name until it gets a label.

import { api, session } from "../api.js";
import { field, h, input, replace } from "../dom.js";
import { formError } from "./common.js";
import { tagRules } from "./tagrules.js";

const LABELS = {
  sanitize: ["Sanitise before storing", "Remove secrets and <private> spans from what is stored"],
  decay_half_life_days: ["Recency half-life (days)", "How fast find's recency bonus fades; 0 turns it off"],
  auto_tag: ["Auto-tag new notes", "With a model from .prompt/tag/* and the .tag/* rules, when the server has one"],
  keep_text: ["Keep notes' text", "For citations that quote and verify, and re-cutting long notes into passages"],
  cors_origins: ["Allowed web origins (CORS)", "scheme://host[:port] of pages that may call the API from a browser, one a line; * for any"],
  "sessions.capture": ["Capture session events", "Store coding-agent hook events at all"],
  "sessions.inject": ["Inject resume context", "Hand resume context to session hooks"],
  "sessions.excludes": ["Excluded paths", "Path globs whose content is never stored, one a line"],
  "sessions.resume_chars": ["Resume context (characters)", null],
  "sessions.llm_tokens_per_day": ["Session model tokens per day", "Empty: the server's budget"],
  "memories.llm_tokens_per_day": ["Memory extraction tokens per day", "Empty: the server's budget"],
};

// {sessions: {capture: true}} -> [["sessions.capture", true]]
function leaves(obj, prefix = "") {
  return Object.entries(obj).flatMap(([key, value]) =>
    value && typeof value === "object" && !Array.isArray(value)
      ? leaves(value, `${prefix}${key}.`)
      : [[`${prefix}${key}`, value]],
  );
}

function control(name, value, disabled) {
  if (typeof value === "boolean") return h("input", { type: "checkbox", name, checked: value, disabled });
  if (Array.isArray(value)) {
    const box = h("textarea", { name, rows: 4, disabled });
    box.value = value.join("\n");
    return box;
  }
  if (typeof value === "string") return input(name, { value, disabled });
  // numbers, and nulls (an unset budget): empty means the server's default
  return input(name, { type: "number", step: "any", min: 0, value: value ?? "", disabled });
}

function read(el, was) {
  if (el.type === "checkbox") return el.checked;
  if (Array.isArray(was)) return el.value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (typeof was === "string") return el.value;
  if (el.value.trim() === "") return null;
  const n = Number(el.value);
  if (!Number.isFinite(n)) throw new Error(`${el.name} must be a number`);
  return n;
}

// Only what changed, nested as PATCH takes it.
function changes(fields) {
  const out = {};
  for (const [name, was, el] of fields) {
    const now = read(el, was);
    if (JSON.stringify(now) === JSON.stringify(was)) continue;
    const path = name.split(".");
    let at = out;
    for (const part of path.slice(0, -1)) at = at[part] = at[part] || {};
    at[path[path.length - 1]] = now;
  }
  return out;
}

function settingsForm(current, ctx, box) {
  const admin = ctx.can("admin");
  const fields = leaves(current)
    .filter(([name]) => name !== "project")
    .map(([name, value]) => [name, value, control(name, value, !admin)]);
  const error = formError("settings-error");
  const form = h(
    "form",
    { class: "settings", "aria-label": "Project settings" },
    admin ? null : h("p", { class: "notice", id: "settings-readonly" }, "Read-only: changing settings needs an admin key."),
    fields.map(([name, , el]) => {
      const [label, hint] = LABELS[name] || [name, null];
      return field(label, el, hint);
    }),
    admin ? h("button", { type: "submit" }, "Save settings") : null,
    error.el,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.clear();
    try {
      const body = changes(fields);
      if (!Object.keys(body).length) {
        ctx.notify("No setting changed.");
        return;
      }
      const saved = await api("PATCH", "/v1/settings", { body });
      replace(box, settingsForm(saved, ctx, box));
      ctx.notify(`Settings saved: ${Object.keys(body).join(", ")}.`);
    } catch (err) {
      error.show(err);
    }
  });
  return form;
}

async function settings(ctx) {
  const box = h("div", {});
  try {
    replace(box, settingsForm(await api("GET", "/v1/settings"), ctx, box));
  } catch (err) {
    replace(box, h("p", { class: "error" }, `Settings unavailable: ${err.message}`));
  }
  return h("section", { "aria-labelledby": "settings-title", id: "settings" }, h("h2", { id: "settings-title" }, "Settings"), box);
}

export async function render(main, params, ctx) {
  const [top, rules] = await Promise.all([settings(ctx), tagRules(ctx)]);
  replace(main, h("h1", {}, `Project ${session.project}`), top, rules);
  return null;
}
