// The dashboard's shell: sign-in, navigation, project picker, the live
// connection, and a hash router that hands each view its container.

import { api, session, stream } from "./api.js";
import { field, h, input, replace, route } from "./dom.js";
import * as admin from "./views/admin.js";
import * as graph from "./views/graph.js";
import * as jobs from "./views/jobs.js";
import * as live from "./views/live.js";
import * as memories from "./views/memories.js";
import * as note from "./views/note.js";
import * as notes from "./views/notes.js";
import * as project from "./views/project.js";
import * as search from "./views/search.js";
import * as sessions from "./views/sessions.js";

const VIEWS = { notes, note, search, graph, memories, sessions, jobs, live, project, admin };
const NAV = [
  ["notes", "Notes"],
  ["search", "Search"],
  ["graph", "Graph"],
  ["memories", "Memories"],
  ["sessions", "Sessions"],
  ["jobs", "Jobs"],
  ["live", "Live"],
  ["project", "Project"],
  ["admin", "Admin"],
];

const root = document.getElementById("app");
const listeners = new Set();
let stopStream = null;
let me = null;

const ctx = {
  get me() {
    return me;
  },
  // tenant administration needs a key without a project lock or tag scope
  can: (scope) =>
    Boolean(me && me.scopes.includes(scope)) &&
    (scope !== "admin" || (!me.project_locked && Object.keys(me.tags).length === 0)),
  onEvent(fn) {
    listeners.add(fn);
    return () => listeners.delete(fn);
  },
  notify(text) {
    const status = document.getElementById("status");
    if (status) replace(status, text);
  },
  fail(error) {
    const alert = document.getElementById("alert");
    if (!alert) return;
    replace(alert, error ? `${error.message}${error.requestId ? ` (request ${error.requestId})` : ""}` : "");
    alert.hidden = !error;
  },
  go(name, params) {
    window.location.hash = route(name, params);
  },
};

function signInPage(message) {
  const key = input("key", { type: "password", required: true, autocomplete: "current-password" });
  const project = input("project", {
    value: session.project || "",
    placeholder: "default, or the key's own project",
    pattern: "[a-z][a-z0-9\\-]{1,62}",
  });
  const error = h("p", { id: "signin-error", role: "alert", class: "error", hidden: !message }, message || "");
  const form = h(
    "form",
    { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in to keepmem"),
    field("API key", key, "Kept in this tab's session storage only; sent as a bearer header."),
    field("Project", project, "Optional; created on first use by a write key."),
    h("button", { type: "submit" }, "Sign in"),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const chosen = project.value.trim();
      await api("GET", "/v1/whoami", { key: key.value.trim(), project: chosen || undefined });
      session.signIn(key.value.trim(), chosen);
      await start();
    } catch (err) {
      replace(error, err.message);
      error.hidden = false;
    }
  });
  replace(root, h("main", { id: "main" }, form));
  key.focus();
}

async function projectPicker() {
  const picker = h("select", { id: "project", name: "project" });
  let slugs = [];
  try {
    slugs = (await api("GET", "/v1/projects")).projects.map((p) => p.slug);
  } catch {
    slugs = [];
  }
  if (!slugs.includes(session.project)) slugs.unshift(session.project);
  for (const slug of slugs) picker.append(h("option", { value: slug, selected: slug === session.project }, slug));
  picker.addEventListener("change", async () => {
    session.useProject(picker.value);
    await start();
  });
  return h("div", { class: "picker" }, h("label", { for: "project" }, "Project"), picker);
}

function connect(indicator) {
  if (stopStream) stopStream();
  stopStream = stream("/v1/events", {
    onEvent(message) {
      let data = null;
      try {
        data = JSON.parse(message.data);
      } catch {
        return;
      }
      if (message.event === "shutdown" || message.event === "error") return;
      for (const fn of listeners) fn(data);
    },
    onState(state) {
      replace(indicator, state === "live" ? "● live" : state);
      indicator.dataset.state = state;
    },
  });
}

async function start() {
  if (!session.key) return signInPage();
  try {
    me = await api("GET", "/v1/whoami");
    if (!session.project) session.useProject(me.project);
  } catch (err) {
    // a refused key is forgotten; a server that is down is not the key's fault
    if (err.status === 401 || err.status === 403) session.signOut();
    return signInPage(err.message);
  }
  const indicator = h("span", { id: "live-state", class: "live-state", role: "status" }, "connecting");
  const signOut = h("button", { type: "button", id: "sign-out" }, "Sign out");
  signOut.addEventListener("click", () => {
    if (stopStream) stopStream();
    session.signOut();
    window.location.hash = "";
    signInPage();
  });
  const nav = h(
    "nav",
    { "aria-label": "Sections" },
    h("ul", {}, NAV.filter(([name]) => name !== "admin" || ctx.can("admin")).map(([name, text]) =>
      h("li", {}, h("a", { href: route(name), id: `nav-${name}` }, text)),
    )),
  );
  const who = h("span", { class: "who" }, `${me.scopes.join(" ")} · ${me.credential}`);
  replace(
    root,
    h("a", { class: "skip", href: "#main" }, "Skip to content"),
    h("header", {}, h("strong", { class: "brand" }, "keepmem"), nav, await projectPicker(), who, indicator, signOut),
    h("p", { id: "alert", role: "alert", class: "error", hidden: true }),
    h("p", { id: "status", role: "status", class: "status" }),
    h("main", { id: "main", tabindex: "-1" }),
  );
  listeners.clear();
  connect(indicator);
  await show();
}

let disposeView = null;

async function show() {
  const main = document.getElementById("main");
  if (!main || !me) return;
  const hash = window.location.hash.startsWith("#/") ? window.location.hash.slice(2) : "";
  const [name, query] = (hash || "notes").split("?");
  const view = VIEWS[name] || notes;
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  if (disposeView) disposeView();
  disposeView = null;
  ctx.fail(null);
  ctx.notify("");
  for (const a of document.querySelectorAll("nav a")) {
    if (a.id === `nav-${name}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  replace(main, h("p", { class: "loading" }, "Loading…"));
  try {
    disposeView = (await view.render(main, params, ctx)) || null;
  } catch (err) {
    replace(main);
    ctx.fail(err);
  }
}

window.addEventListener("hashchange", () => {
  // "#main" is the skip link's target, not a route
  const hash = window.location.hash;
  if (session.key && (hash === "" || hash.startsWith("#/"))) show();
});
start();
