/**
 * `Keepmem`: the methods of the Python SDK's `Keepmem`, named in camelCase,
 * sent through `Transport` (retries, timeout, errors).
 *
 * Reads and other calls that are safe to repeat (get, find, list,
 * versions, memories, settings) are retried on connection errors, 429
 * (after `Retry-After`) and 5xx, `maxRetries` times with exponential backoff
 * and jitter; writes (put, putMany, tag, delete, remember) are never
 * repeated: the first attempt may have been stored.
 */

import { APIConnectionError, APIError, KeepmemError } from "./errors.js";
import { type Call, type KeepmemOptions, Transport, clean, notePath, sleep } from "./http.js";
import { parseEventStream } from "./sse.js";
import type {
  BatchOut,
  ChangeEvent,
  Deleted,
  FindParams,
  ListParams,
  MemoriesQuery,
  Memory,
  Note,
  NotePage,
  ProjectSettings,
  PutNote,
  RememberParams,
  Remembered,
  SearchResult,
  SettingsChange,
  Tags,
  VersionList,
} from "./types.js";

/** `put`'s fields besides the content. */
export type PutOptions = Omit<PutNote, "content">;

/** `listAll` and `pages`: `list`'s filters and the page size (default 100). */
export interface ListAllParams extends Omit<ListParams, "limit" | "cursor"> {
  pageSize?: number;
}

/** What `events` watches, and how. */
export interface EventsParams {
  /** Kinds wanted (put, tag, delete, move, revert, summary, embedding, parts, failed); all when left out. */
  kinds?: string[];
  /** `key: value` the note must hold. */
  tags?: Record<string, string>;
  /** Tag keys the note must hold. */
  tagKeys?: string[];
  /** Start after this event id; without it the stream starts at the newest change. */
  after?: string;
  /** Ends the stream (as `close()` does). */
  signal?: AbortSignal;
  /**
   * Reconnect when the connection drops or the server restarts (its
   * `shutdown` event), resuming after the last event received: nothing
   * written meanwhile is missed. Default true.
   */
  reconnect?: boolean;
}

/** Options of a raw `request`. */
export interface RequestOptions {
  query?: Call["query"];
  body?: unknown;
  /** Safe to repeat (retried like the reads); default false. */
  idempotent?: boolean;
  signal?: AbortSignal;
}

function listQuery(params: ListParams): Call["query"] {
  return {
    prefix: params.prefix,
    tag: Object.entries(params.tags ?? {}).map(([key, value]) => `${key}=${value}`),
    tag_key: params.tagKeys ?? [],
    since: params.since,
    until: params.until,
    order_by: params.orderBy,
    limit: params.limit,
    cursor: params.cursor,
    include_hidden: params.includeHidden,
  };
}

/**
 * A keepmem client for Node 20+ and browsers.
 *
 *     const km = new Keepmem({ url: "https://keepmem.example", apiKey: "km_..." });
 *     await km.put("OAuth2 uses PKCE", { id: "auth", tags: { topic: "auth" } });
 *     for (const hit of (await km.find("PKCE")).notes) console.log(hit.id, hit.score);
 */
export class Keepmem {
  private readonly http: Transport;

  constructor(options: KeepmemOptions = {}) {
    this.http = new Transport(options);
  }

  /** The base URL this client calls. */
  get url(): string {
    return this.http.url;
  }

  /** Any API call: `path` under the base URL, the answer's JSON. */
  request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    return this.http.send<T>({ method, path, ...options });
  }

  /**
   * Create or update a note: `put("text", { id, tags, ... })`, or the whole
   * note as one object. A URI alone is fetched by keepmem. Never retried.
   */
  put(content: string | null | PutNote, options: PutOptions = {}): Promise<Note> {
    const note = typeof content === "object" && content !== null ? content : { ...options, content };
    return this.http.send({ method: "POST", path: "/v1/notes", body: clean(note) });
  }

  /**
   * Up to 100 notes (each `put`'s fields) in one request and one
   * transaction; each is stored or refused on its own (`results`, in order).
   */
  putMany(notes: PutNote[]): Promise<BatchOut> {
    const body = { notes: notes.map((note) => clean(note)) };
    return this.http.send({ method: "POST", path: "/v1/notes/batch", body });
  }

  /**
   * A note, `ID@V{N}` version or `ID@P{N}` part (NotFoundError if none);
   * with `asOf` (ISO-8601), the note as it read then.
   */
  get(noteId: string, options: { asOf?: string } = {}): Promise<Note> {
    return this.http.send({
      method: "GET",
      path: notePath(noteId),
      query: { as_of: options.asOf },
      idempotent: true,
    });
  }

  /** Hybrid find; every field of `POST /v1/search` is a parameter. */
  find(query?: string | null, params: Omit<FindParams, "query"> = {}): Promise<SearchResult> {
    const body = clean({ ...params, query });
    return this.http.send({ method: "POST", path: "/v1/search", body, idempotent: true });
  }

  /** One page of notes, newest first; pass `next_cursor` back as `cursor`. */
  list(params: ListParams = {}): Promise<NotePage> {
    return this.http.send({ method: "GET", path: "/v1/notes", query: listQuery(params), idempotent: true });
  }

  /** Every page of the matching notes, fetched as you iterate. */
  async *pages(params: ListAllParams = {}): AsyncGenerator<NotePage, void, undefined> {
    const { pageSize = 100, ...filters } = params;
    let cursor: string | undefined;
    for (;;) {
      const page = await this.list({ ...filters, limit: pageSize, cursor });
      yield page;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** Every matching note, page by page as you iterate (`for await`). */
  async *listAll(params: ListAllParams = {}): AsyncGenerator<Note, void, undefined> {
    for await (const page of this.pages(params)) yield* page.notes;
  }

  /** Archived versions, newest first (offset 1 is the previous version). */
  versions(noteId: string, options: { limit?: number; offset?: number } = {}): Promise<VersionList> {
    return this.http.send({
      method: "GET",
      path: notePath(noteId, "/versions"),
      query: { limit: options.limit ?? 10, offset: options.offset ?? 0 },
      idempotent: true,
    });
  }

  /**
   * Change a note's tags in place: `set` adds values (`""` removes a key),
   * `remove` drops keys, `removeValues` drops single values. Never retried.
   */
  tag(
    noteId: string,
    set?: Tags | null,
    options: { remove?: string[]; removeValues?: Tags } = {},
  ): Promise<Note> {
    const body = clean({ set, remove: options.remove, remove_values: options.removeValues });
    return this.http.send({ method: "PATCH", path: notePath(noteId, "/tags"), body });
  }

  /**
   * Delete a note with its history, or with `deleteVersions: false` revert
   * it to its previous version. Never retried (a revert repeated reverts twice).
   */
  delete(noteId: string, options: { deleteVersions?: boolean } = {}): Promise<Deleted> {
    return this.http.send({
      method: "DELETE",
      path: notePath(noteId),
      query: { delete_versions: options.deleteVersions ?? true },
    });
  }

  /**
   * Write a memory without extraction, reconciled with what is believed:
   * said again, it updates (or leaves) the memory (`op` says which). Never retried.
   */
  remember(statement: string, params: Omit<RememberParams, "statement"> = {}): Promise<Remembered> {
    const body = clean({ ...params, statement });
    return this.http.send({ method: "POST", path: "/v1/memories", body });
  }

  /**
   * Memories, newest first: current ones unless `as_of` or
   * `include_superseded`; all of the project's when no owner is named.
   */
  async memories(query: MemoriesQuery = {}): Promise<Memory[]> {
    const page = await this.http.send<{ memories: Memory[] }>({
      method: "GET",
      path: "/v1/memories",
      query: query as Call["query"],
      idempotent: true,
    });
    return page.memories;
  }

  /** The project's settings, the server's defaults filled in. */
  settings(): Promise<ProjectSettings> {
    return this.http.send({ method: "GET", path: "/v1/settings", idempotent: true });
  }

  /** Change the settings named (an admin key); `null` puts one back to the server's default. */
  updateSettings(changes: SettingsChange): Promise<ProjectSettings> {
    return this.http.send({ method: "PATCH", path: "/v1/settings", body: changes });
  }

  /** `{"status": "ok", ...}` when keepmem is up. */
  health(): Promise<Record<string, unknown>> {
    return this.http.send({ method: "GET", path: "/v1/health", idempotent: true });
  }

  /**
   * The project's changes as they happen (`GET /v1/events`): resolves once
   * the stream is open (an APIError if refused), so a write made after it
   * is seen. Iterate with `for await`; `close()`, the signal or a `break`
   * ends it.
   */
  async events(params: EventsParams = {}): Promise<EventStream> {
    const stream = new EventStream(this.http, params);
    await stream.connect();
    return stream;
  }
}

/**
 * An open `GET /v1/events`: an async iterable of the changes (the JSON of
 * each event), reconnecting after the last one received unless told not to.
 * Iterate it once.
 */
export class EventStream implements AsyncIterable<ChangeEvent> {
  /** The id of the last event received: where a reconnection resumes. */
  lastEventId: string | undefined;
  private readonly controller = new AbortController();
  private response: Response | undefined;
  private retryMs = 2000;
  private iterated = false;

  constructor(
    private readonly http: Transport,
    private readonly params: EventsParams,
  ) {
    this.lastEventId = params.after;
    const outer = params.signal;
    if (outer?.aborted) this.controller.abort(outer.reason);
    else outer?.addEventListener("abort", () => this.controller.abort(outer.reason), { once: true });
  }

  /** Whether the stream was closed (by `close()` or the signal). */
  get closed(): boolean {
    return this.controller.signal.aborted;
  }

  /** End the stream: the connection is closed and iteration stops. */
  close(): void {
    this.controller.abort(new KeepmemError("event stream closed"));
  }

  /** Open (or reopen) the connection, after the last event received. */
  async connect(): Promise<void> {
    this.response = await this.http.stream({
      method: "GET",
      path: "/v1/events",
      query: {
        kind: this.params.kinds ?? [],
        tag: Object.entries(this.params.tags ?? {}).map(([key, value]) => `${key}=${value}`),
        tag_key: this.params.tagKeys ?? [],
        after: this.lastEventId,
      },
      signal: this.controller.signal,
    });
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ChangeEvent, void, undefined> {
    if (this.iterated) throw new KeepmemError("an event stream is iterated once");
    this.iterated = true;
    const reconnect = this.params.reconnect ?? true;
    try {
      while (!this.closed) {
        if (this.response === undefined) {
          try {
            await this.connect();
          } catch (error) {
            if (this.closed) return;
            const transient =
              error instanceof APIConnectionError ||
              (error instanceof APIError && (error.status === 429 || error.status >= 500));
            if (!transient) throw error;
            await this.pause();
            continue;
          }
        }
        const body = this.response?.body;
        this.response = undefined;
        if (body) {
          try {
            for await (const message of parseEventStream(body)) {
              if (message.retry !== undefined) this.retryMs = message.retry;
              // The server ends the stream (restarting, or failed): resume elsewhere.
              if (message.event === "shutdown" || message.event === "error") break;
              const change = parseChange(message.data);
              if (change === undefined) continue;
              this.lastEventId = message.id ?? change.id;
              yield change;
            }
          } catch (error) {
            if (this.closed) return;
            if (!reconnect) {
              const why = error instanceof Error ? error.message : String(error);
              throw new APIConnectionError(`event stream broken: ${why}`, { cause: error });
            }
          }
        }
        if (!reconnect || this.closed) return;
        await this.pause();
      }
    } finally {
      // A `break` in the caller's loop lands here: the connection closes.
      if (!this.closed) this.close();
    }
  }

  private async pause(): Promise<void> {
    try {
      await sleep(this.retryMs, this.controller.signal);
    } catch {
      // closed while waiting: the loop ends
    }
  }
}

function parseChange(data: string): ChangeEvent | undefined {
  try {
    const value: unknown = JSON.parse(data);
    return typeof value === "object" && value !== null ? (value as ChangeEvent) : undefined;
  } catch {
    return undefined;
  }
}
