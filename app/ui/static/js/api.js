// The one door to keepmem's REST API. The key lives in session storage (gone
// when the tab closes) and travels only in the Authorization header.

const KEY = "keepmem.key";
const PROJECT = "keepmem.project";

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
    this.requestId = body && body.request_id;
  }
}

export const session = {
  get key() {
    return sessionStorage.getItem(KEY);
  },
  // null until chosen: the server then uses the key's own project or "default"
  get project() {
    return sessionStorage.getItem(PROJECT);
  },
  signIn(key, project) {
    sessionStorage.setItem(KEY, key);
    if (project) sessionStorage.setItem(PROJECT, project);
    else sessionStorage.removeItem(PROJECT);
  },
  useProject(project) {
    sessionStorage.setItem(PROJECT, project);
  },
  signOut() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(PROJECT);
  },
};

function headers(extra, project = session.project) {
  const out = { Accept: "application/json", ...extra };
  if (project) out["X-Project"] = project;
  if (session.key && !out.Authorization) out.Authorization = `Bearer ${session.key}`;
  return out;
}

// key / project: for the sign-in check, before they are kept
export async function api(method, path, { query, body, key, project } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v !== undefined && v !== null && v !== "") url.searchParams.append(name, v);
    }
  }
  const extra = body === undefined ? {} : { "Content-Type": "application/json" };
  if (key) extra.Authorization = `Bearer ${key}`;
  const response = await fetch(url, {
    method,
    headers: headers(extra, project || session.project),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const noteUrl = (id, tail = "") => `/v1/notes/${encodeURIComponent(id)}${tail}`;
export const sessionUrl = (id, tail = "") => `/v1/sessions/${encodeURIComponent(id)}${tail}`;
// memory ids hold a "/" (mem/...): one path segment, as note ids are sent
export const memoryUrl = (id) => `/v1/memories/${encodeURIComponent(id)}`;

// Server-sent events over fetch (EventSource cannot send a bearer header).
// Calls onEvent({id, event, data}) per event; reconnects from the last id.
export function stream(path, { onEvent, onState }) {
  let stopped = false;
  let lastId = null;
  let controller = null;
  let retry = 2000;

  async function once() {
    controller = new AbortController();
    const extra = lastId ? { "Last-Event-ID": lastId, Accept: "text/event-stream" } : {};
    const response = await fetch(new URL(path, window.location.origin), {
      headers: headers({ Accept: "text/event-stream", ...extra }),
      credentials: "omit",
      cache: "no-store",
      signal: controller.signal,
    });
    if (!response.ok) {
      let body = null;
      try {
        body = await response.json();
      } catch {
        body = null;
      }
      throw new ApiError(response.status, body);
    }
    onState("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = { data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.search(/\r\n|\n|\r/)) >= 0) {
        const line = buffer.slice(0, cut);
        buffer = buffer.slice(cut + (buffer.startsWith("\r\n", cut) ? 2 : 1));
        if (line === "") {
          if (event.data.length) {
            if (event.id) lastId = event.id;
            onEvent({ id: event.id, event: event.event || "message", data: event.data.join("\n") });
          }
          event = { data: [] };
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (name === "data") event.data.push(val);
          else if (name === "id") event.id = val;
          else if (name === "event") event.event = val;
          else if (name === "retry" && /^\d+$/.test(val)) retry = Number(val);
        }
      }
    }
  }

  (async () => {
    while (!stopped) {
      try {
        await once();
        if (!stopped) onState("reconnecting");
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.code === "cursor_expired" && lastId) {
          // the last event is gone (the project was erased): follow from the newest
          lastId = null;
          onState("reconnecting");
          continue;
        }
        onState(error instanceof ApiError && error.status < 500 ? `off: ${error.message}` : "reconnecting");
        if (error instanceof ApiError && error.status < 500 && error.status !== 429) return;
      }
      await new Promise((resolve) => setTimeout(resolve, retry));
    }
  })();

  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}
