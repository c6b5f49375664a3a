// Building the page without HTML strings: every piece of text a note, a tag or
// an error brings is a text node, never markup. Nothing here parses HTML.

const SVG = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) {
      el.addEventListener(name.slice(2), value);
    } else if (name === "href" && !String(value).startsWith("#")) {
      throw new Error("links stay inside the dashboard");
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

// h("a", {href: "#/notes"}, "Notes") -> <a href="#/notes">Notes</a>
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

let labelled = 0;

// A labelled form control: <label for=id>text</label> + control.
export function field(text, control, hint) {
  const id = control.id || `f${++labelled}`;
  control.id = id;
  const parts = [h("label", { for: id }, text), control];
  if (hint) {
    const hintId = `${id}-hint`;
    control.setAttribute("aria-describedby", hintId);
    parts.push(h("small", { id: hintId, class: "hint" }, hint));
  }
  return h("div", { class: "field" }, parts);
}

export function input(name, attrs) {
  return h("input", { name, type: "text", autocomplete: "off", ...attrs });
}

export function checkbox(text, name, checked) {
  const box = h("input", { type: "checkbox", name, checked });
  return field(text, box);
}

export function select(name, options, value) {
  return h(
    "select",
    { name },
    options.map(([v, label]) => h("option", { value: v, selected: v === value }, label)),
  );
}

// Times as UTC. keep's timestamps carry no zone and are UTC: read them so
// (a browser would take a zone-less date-time as local time).
export function when(iso) {
  if (!iso) return "";
  const text = String(iso);
  const d = new Date(/(Z|[+-]\d\d:?\d\d)$/i.test(text) || !text.includes("T") ? text : `${text}Z`);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace("T", " ").slice(0, 19);
}

// A link to a dashboard route, e.g. link("Open", "note", {id}) -> #/note?id=...
export function route(name, params) {
  const query = new URLSearchParams(params || {}).toString();
  return `#/${name}${query ? `?${query}` : ""}`;
}

export function link(text, name, params, attrs) {
  return h("a", { href: route(name, params), ...attrs }, text);
}

export function table(headers, rows, caption) {
  return h(
    "table",
    {},
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows),
  );
}

export function tagList(tags) {
  const items = [];
  for (const [key, value] of Object.entries(tags || {})) {
    for (const v of Array.isArray(value) ? value : [value]) {
      items.push(h("li", { class: "tag" }, `${key}=${v}`));
    }
  }
  return h("ul", { class: "tags" }, items);
}
