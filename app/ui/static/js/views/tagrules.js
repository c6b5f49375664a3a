// Tag rules and edge tags: what GET /v1/tag-rules reads from the project's
// .tag/* notes. A write key changes a rule the way keep's users do, by
// writing the .tag/<key> note's own tags (_singular, _constrained,
// _value_regex, _inverse, _requires; "" removes one), and allows a value of a
// constrained tag by writing a .tag/<key>/<value> note. The API checks the
// rule (a bad regex is a 400); its message is shown as it comes.

import { api, noteUrl } from "../api.js";
import { checkbox, field, h, input, link, replace, table } from "../dom.js";
import { formError } from "./common.js";

const FLAGS = ["_singular", "_constrained"];
const TEXTS = ["_value_regex", "_inverse", "_requires"];

function ruleRow(rule, edit) {
  const values = rule.values || [];
  const allowed = rule.constrained ? (values.length ? values.join(", ") : "yes (no values yet)") : "–";
  const button = edit ? h("button", { type: "button", "aria-label": `Edit rule ${rule.key}` }, "Edit") : null;
  if (button) button.addEventListener("click", () => edit(rule));
  return h(
    "tr",
    { "data-id": rule.key },
    h(
      "td",
      { class: "key mono" },
      link(rule.key, "note", { id: `.tag/${rule.key}` }),
      rule.problem ? h("div", { class: "error problem" }, `Not applied: ${rule.problem}`) : null,
    ),
    h("td", { class: "singular" }, rule.singular ? "yes" : "–"),
    h("td", { class: "constrained" }, allowed),
    h("td", { class: "regex mono" }, rule.value_regex || "–"),
    h("td", { class: "edge" }, rule.inverse ? `edge; inverse: ${rule.inverse}` : "–"),
    h("td", { class: "requires" }, rule.requires || "–"),
    h("td", {}, button),
  );
}

function flat(value) {
  return Array.isArray(value) ? value.join(",") : value === undefined || value === null ? "" : String(value);
}

// The tags to set on an existing .tag/<key> note: what differs, "" to remove.
function tagChanges(wanted, had) {
  const set = {};
  for (const [key, value] of Object.entries(wanted)) {
    const old = flat(had[key]);
    const unset = old === "" || (FLAGS.includes(key) && old === "false");
    if (value === old || (value === "" && unset)) continue;
    set[key] = value;
  }
  return set;
}

async function saveRule(key, wanted, description) {
  const id = `.tag/${key}`;
  let note = null;
  try {
    note = await api("GET", noteUrl(id));
  } catch (err) {
    if (err.status !== 404) throw err;
  }
  if (!note) {
    const tags = Object.fromEntries(Object.entries(wanted).filter(([, v]) => v !== ""));
    await api("POST", "/v1/notes", { body: { id, content: description || `Tag ${key}.`, tags } });
    return true;
  }
  const set = tagChanges(wanted, note.tags || {});
  if (!Object.keys(set).length) return false;
  await api("PATCH", noteUrl(id, "/tags"), { body: { set } });
  return true;
}

function ruleForm(ctx, reload) {
  const key = input("rule-key", { required: true, placeholder: "status" });
  const description = h("textarea", { name: "rule-description", rows: 2 });
  const singular = checkbox("Singular (a new value replaces)", "rule-singular", false);
  const constrained = checkbox("Constrained (allowed values only)", "rule-constrained", false);
  const regex = input("rule-regex", { placeholder: "[a-z]+" });
  const inverse = input("rule-inverse", { placeholder: "referenced_by" });
  const requires = input("rule-requires", { placeholder: "act" });
  const box = (f) => f.querySelector("input");
  const error = formError("rule-error");
  const form = h(
    "form",
    { class: "editor", "aria-label": "Create or edit a tag rule" },
    field("Tag key", key),
    field("Description", description, "The .tag note's text, when the rule is new"),
    h("fieldset", {}, h("legend", {}, "Flags"), singular, constrained),
    field("Value regex", regex, "Each value must match it whole; not with Constrained"),
    field("Inverse verb", inverse, "Makes the tag an edge tag: its values are note ids"),
    field("Requires", requires, "The rule applies only when this tag is present"),
    h("button", { type: "submit" }, "Save rule"),
    error.el,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = key.value.trim();
    const wanted = {
      _singular: box(singular).checked ? "true" : "",
      _constrained: box(constrained).checked ? "true" : "",
      _value_regex: regex.value.trim(),
      _inverse: inverse.value.trim(),
      _requires: requires.value.trim(),
    };
    error.clear();
    try {
      const changed = await saveRule(name, wanted, description.value.trim());
      ctx.notify(changed ? `Rule for ${name} saved.` : `Rule for ${name}: nothing to change.`);
      await reload();
    } catch (err) {
      error.show(err);
    }
  });
  const edit = (rule) => {
    key.value = rule.key;
    description.value = "";
    box(singular).checked = Boolean(rule.singular);
    box(constrained).checked = Boolean(rule.constrained);
    regex.value = rule.value_regex || "";
    inverse.value = rule.inverse || "";
    requires.value = rule.requires || "";
    key.focus();
  };
  return { form, edit };
}

function valueForm(ctx, reload) {
  const key = input("value-key", { required: true, placeholder: "status" });
  const value = input("value-name", { required: true, placeholder: "open" });
  const error = formError("value-error");
  const form = h(
    "form",
    { class: "inline", "aria-label": "Allow a value" },
    field("Tag key", key),
    field("Allowed value", value, "Writes the note .tag/<key>/<value>"),
    h("button", { type: "submit" }, "Allow value"),
    error.el,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const [k, v] = [key.value.trim(), value.value.trim()];
    error.clear();
    try {
      await api("POST", "/v1/notes", { body: { id: `.tag/${k}/${v}`, content: `${k}=${v}` } });
      ctx.notify(`Value ${v} allowed for ${k}.`);
      await reload();
    } catch (err) {
      error.show(err);
    }
  });
  return form;
}

export async function tagRules(ctx) {
  const list = h("div", { id: "rules" });
  const write = ctx.can("write");
  let edit = null;
  async function reload() {
    try {
      const rules = (await api("GET", "/v1/tag-rules")).rules || [];
      const edges = rules.filter((r) => r.inverse).map((r) => r.key);
      replace(
        list,
        h("p", { class: "count", role: "status" }, `${rules.length} rules; edge tags: ${edges.join(", ") || "none"}`),
        table(["Key", "Singular", "Constrained (allowed values)", "Value regex", "Edge", "Requires", ""], rules.map((r) => ruleRow(r, edit)), "Rules from the project's .tag/* notes"),
      );
    } catch (err) {
      replace(list, h("p", { class: "error" }, `Tag rules unavailable: ${err.message}`));
    }
  }
  const forms = [];
  if (write) {
    const rule = ruleForm(ctx, reload);
    edit = rule.edit;
    forms.push(rule.form, valueForm(ctx, reload));
  }
  await reload();
  return h(
    "section",
    { "aria-labelledby": "rules-title", id: "tag-rules" },
    h("h2", { id: "rules-title" }, "Tag rules and edge tags"),
    list,
    forms,
  );
}
