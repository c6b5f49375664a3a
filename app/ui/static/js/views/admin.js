// Admin (admin-scope keys): the tenant's keys (create, list, revoke) and its
// usage against its quotas.

import { api } from "../api.js";
import { checkbox, field, h, input, replace, table, when } from "../dom.js";

function usage(figures) {
  const q = figures.quotas || {};
  const line = (label, value, quota) => h("tr", {}, h("th", { scope: "row" }, label), h("td", { class: "num" }, String(value ?? "–")), h("td", { class: "num" }, quota === null || quota === undefined ? "unlimited" : String(quota)));
  return h(
    "section",
    { "aria-labelledby": "usage-title", id: "usage" },
    h("h2", { id: "usage-title" }, "Usage"),
    table(["", "Now", "Quota"], [
      line("Notes", figures.notes, q.notes),
      line("Bytes", figures.bytes, q.bytes),
      line("Requests today", figures.requests_today, q.requests_per_day),
      line("Jobs today", figures.jobs_today, q.jobs_per_day),
    ], "Usage and quotas"),
  );
}

function keyRow(key, ctx, reload) {
  let action = null;
  if (!key.revoked_at) {
    action = h("button", { type: "button", "aria-label": `Revoke key ${key.name}` }, "Revoke");
    action.addEventListener("click", async () => {
      if (action.dataset.armed !== "yes") {
        action.dataset.armed = "yes";
        action.textContent = "Confirm revoke";
        return;
      }
      try {
        await api("DELETE", `/v1/keys/${encodeURIComponent(key.id)}`);
        ctx.notify(`Key ${key.name} revoked.`);
        await reload();
      } catch (err) {
        ctx.fail(err);
      }
    });
  }
  return h(
    "tr",
    { "data-key": key.id },
    h("td", {}, key.name),
    h("td", { class: "mono" }, `${key.prefix}…`),
    h("td", {}, key.scopes.join(" ")),
    h("td", { class: "when" }, when(key.created_at)),
    h("td", { class: "when" }, when(key.last_used_at)),
    h("td", {}, key.revoked_at ? `revoked ${when(key.revoked_at)}` : key.expires_at ? `expires ${when(key.expires_at)}` : "active"),
    h("td", {}, action),
  );
}

export async function render(main, params, ctx) {
  if (!ctx.can("admin")) {
    replace(main, h("h1", {}, "Admin"), h("p", {}, "This key has no admin scope."));
    return null;
  }
  const keys = h("div", { id: "keys" });
  const created = h("div", { id: "created", "aria-live": "polite" });
  const name = input("name", { required: true, maxlength: 200 });
  const scopes = ["read", "write", "admin"].map((s) => checkbox(s, `scope-${s}`, s !== "admin"));
  const form = h(
    "form",
    { class: "inline", "aria-label": "Create a key" },
    field("Key name", name),
    h("fieldset", {}, h("legend", {}, "Scopes"), scopes),
    h("button", { type: "submit" }, "Create key"),
  );
  async function reload() {
    const [list, figures] = await Promise.all([api("GET", "/v1/keys"), api("GET", "/v1/usage")]);
    replace(keys, table(["Name", "Key", "Scopes", "Created", "Last used", "State", ""], list.keys.map((k) => keyRow(k, ctx, reload)), "Keys of this tenant"));
    replace(usageBox, usage(figures));
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = scopes.map((f) => f.querySelector("input")).filter((b) => b.checked).map((b) => b.name.slice(6));
    try {
      const made = await api("POST", "/v1/keys", { body: { name: name.value.trim(), scopes: chosen } });
      const secret = h("input", { type: "text", readonly: true, value: made.key, id: "new-key", class: "mono" });
      replace(created, h("div", { class: "notice" }, field("New key (shown once: copy it now)", secret)));
      secret.select();
      await reload();
    } catch (err) {
      ctx.fail(err);
    }
  });
  const usageBox = h("div", {});
  replace(main, h("h1", {}, "Admin"), usageBox, h("section", { "aria-labelledby": "keys-title" }, h("h2", { id: "keys-title" }, "API keys"), form, created, keys));
  await reload();
  return null;
}
