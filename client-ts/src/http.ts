/**
 * What every call shares: configuration, how a call is sent, the timeout,
 * the error mapping and the retry policy (the Python SDK's `_base` and
 * `SyncBase._send`). fetch only, so one build serves Node 20 and browsers.
 */

import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  KeepmemError,
  RateLimitError,
  errorFor,
} from "./errors.js";

export const VERSION = "0.1.0";
export const DEFAULT_URL = "http://127.0.0.1:8765";
export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_RETRIES = 2;

/** What `fetch` the client calls: the global one unless you give yours. */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface KeepmemOptions {
  /** keepmem's base URL (else `KEEPMEM_URL` in Node, else http://127.0.0.1:8765). */
  url?: string;
  /** An API key (else `KEEPMEM_API_KEY` in Node). */
  apiKey?: string;
  /** The project (`X-Project`; else `KEEPMEM_PROJECT` in Node, else the default project). */
  project?: string;
  /** How long one attempt may take, answer read included (default 30 s). */
  timeoutMs?: number;
  /** Retries of a call that is safe to repeat (default 2). */
  maxRetries?: number;
  /** A fetch to use instead of the global one (a proxy, a test double). */
  fetch?: FetchLike;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

/**
 * A write's consistency token (its WAL position on the primary), sent back on
 * later requests: a read replica serves them only once it has that write.
 */
export const CONSISTENCY_HEADER = "X-Keepmem-Consistency";

/** A WAL position (`16/B374D848`) as a number to compare; undefined if it is not one. */
export function lsnPosition(token: string): bigint | undefined {
  const match = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(token.trim());
  if (!match) return undefined;
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

/** A query: `undefined`/`null` left out, arrays repeated, booleans as `true`/`false`. */
export type QueryValue = string | number | boolean | null | undefined;
export type Query = Record<string, QueryValue | readonly QueryValue[]>;

/** One API call: what to send, and whether it may be repeated. */
export interface Call {
  method: string;
  path: string;
  query?: Query;
  body?: unknown;
  /** Safe to repeat: retried on connection errors, 429 and 5xx. */
  idempotent?: boolean;
  signal?: AbortSignal;
}

function env(name: string): string | undefined {
  // Node's environment when there is one; browsers have none.
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name] || undefined;
}

function isNode(): boolean {
  const proc = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof proc?.versions?.node === "string";
}

/** Without the `undefined` and `null` values: the server's defaults apply. */
export function clean<T extends Record<string, unknown>>(values: T): Partial<T> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(values)) {
    if (value !== undefined && value !== null) out[key] = value;
  }
  return out as Partial<T>;
}

/** A note id as one path segment (ids may hold `/`, `:`, spaces). */
export function notePath(noteId: string, suffix = ""): string {
  return `/v1/notes/${encodeURIComponent(noteId)}${suffix}`;
}

export function queryString(query: Query | undefined): string {
  const params = new URLSearchParams();
  for (const [key, raw] of Object.entries(query ?? {})) {
    const values = Array.isArray(raw) ? raw : [raw];
    for (const value of values) {
      if (value !== undefined && value !== null) params.append(key, String(value));
    }
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

function headersOf(response: Response): Record<string, string> {
  const out: Record<string, string> = {};
  response.headers.forEach((value, key) => {
    out[key.toLowerCase()] = value;
  });
  return out;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Connection failures, 429 and 5xx, for calls that are safe to repeat. */
export function shouldRetry(error: unknown, call: Call): boolean {
  if (!call.idempotent) return false;
  if (error instanceof RateLimitError) return true;
  if (error instanceof APIError) return error.status >= 500;
  return error instanceof APIConnectionError;
}

/**
 * Milliseconds to wait before retry `attempt` (1, 2, ...): `Retry-After`
 * when the server gave one (at most 60 s), else 0.5 s doubling with jitter.
 */
export function backoffMs(attempt: number, error: unknown): number {
  if (error instanceof RateLimitError && error.retryAfter !== undefined) {
    return Math.min(error.retryAfter, 60) * 1000;
  }
  return Math.min(0.5 * 2 ** (attempt - 1), 8) * (0.5 + Math.random() / 2) * 1000;
}

/** Wait `ms`; an abort of `signal` ends the wait with the abort's reason. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A fetch attempt with the client's timeout, linked to the caller's signal. */
class Attempt {
  readonly controller = new AbortController();
  timedOut = false;
  private readonly timer: ReturnType<typeof setTimeout>;
  private readonly onAbort: () => void;

  constructor(
    timeoutMs: number,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new APITimeoutError(`keepmem did not answer within ${timeoutMs} ms`));
    }, timeoutMs);
    this.onAbort = () => this.controller.abort(signal?.reason);
    if (signal?.aborted) this.onAbort();
    else signal?.addEventListener("abort", this.onAbort, { once: true });
  }

  /** The timeout no longer applies (a stream's body may last). */
  stopTimer(): void {
    clearTimeout(this.timer);
  }

  end(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener("abort", this.onAbort);
  }

  /** What a failure of fetch, or of reading its body, is to the caller. */
  failure(error: unknown): unknown {
    if (this.signal?.aborted) return this.signal.reason; // the caller asked: not ours to wrap
    if (this.timedOut) return new APITimeoutError("keepmem did not answer in time", { cause: error });
    if (error instanceof KeepmemError) return error;
    const why = error instanceof Error ? error.message : String(error);
    return new APIConnectionError(`cannot reach keepmem: ${why}`, { cause: error });
  }
}

/** The HTTP side of the client: configuration, one send with retries. */
export class Transport {
  readonly url: string;
  readonly project: string | undefined;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  private readonly apiKey: string | undefined;
  private readonly fetchImpl: FetchLike;
  private readonly extraHeaders: Record<string, string>;
  /** The newest consistency token this client's writes were answered with. */
  consistencyToken: string | undefined;
  private consistencyPosition = -1n;

  /** Options first, then `KEEPMEM_URL` / `KEEPMEM_API_KEY` / `KEEPMEM_PROJECT`, then the defaults. */
  constructor(options: KeepmemOptions = {}) {
    this.url = (options.url ?? env("KEEPMEM_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? env("KEEPMEM_API_KEY");
    this.project = options.project ?? env("KEEPMEM_PROJECT");
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
    const given = options.fetch;
    // The global fetch called on its own (a browser's refuses another `this`).
    this.fetchImpl = given ?? ((input, init) => globalThis.fetch(input, init));
    this.extraHeaders = { ...(options.headers ?? {}) };
  }

  /**
   * The headers of every request. Browsers choose their own User-Agent, and
   * each header beyond the CORS-safe ones must be allowed by the server:
   * only `Authorization`, `Content-Type` (with a body), `X-Project` and,
   * after a write answered with one, `X-Keepmem-Consistency` are sent.
   */
  headers(body: boolean): Record<string, string> {
    const out: Record<string, string> = {};
    if (isNode()) out["User-Agent"] = `keepmem-client-ts/${VERSION}`;
    if (body) out["Content-Type"] = "application/json";
    if (this.apiKey) out["Authorization"] = `Bearer ${this.apiKey}`;
    if (this.project) out["X-Project"] = this.project;
    if (this.consistencyToken) out[CONSISTENCY_HEADER] = this.consistencyToken;
    return { ...out, ...this.extraHeaders };
  }

  /** Remember the answer's consistency token when it is newer than the one held. */
  private observe(response: Response): void {
    const given = response.headers?.get?.(CONSISTENCY_HEADER);
    if (!given) return;
    const position = lsnPosition(given);
    if (position === undefined) {
      this.consistencyToken = given;
    } else if (position > this.consistencyPosition) {
      this.consistencyPosition = position;
      this.consistencyToken = given;
    }
  }

  private target(call: Pick<Call, "path" | "query">): string {
    return `${this.url}${call.path}${queryString(call.query)}`;
  }

  /** The answer's JSON (`{}` when empty), retried as far as `call` allows. */
  async send<T>(call: Call): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.once(call)) as T;
      } catch (error) {
        if (attempt > this.maxRetries || !shouldRetry(error, call)) throw error;
        await sleep(backoffMs(attempt, error), call.signal);
      }
    }
  }

  private async once(call: Call): Promise<unknown> {
    const attempt = new Attempt(this.timeoutMs, call.signal);
    const hasBody = call.body !== undefined;
    try {
      let response: Response;
      let text: string;
      try {
        response = await this.fetchImpl(this.target(call), {
          method: call.method,
          headers: this.headers(hasBody),
          body: hasBody ? JSON.stringify(call.body) : undefined,
          signal: attempt.controller.signal,
        });
        this.observe(response);
        text = await response.text(); // within the timeout too
      } catch (error) {
        throw attempt.failure(error);
      }
      if (!response.ok) {
        const body = parseJson(text) ?? { error: text.slice(0, 500) || response.statusText };
        throw errorFor(response.status, body, headersOf(response));
      }
      return text ? (parseJson(text) ?? text) : {};
    } finally {
      attempt.end();
    }
  }

  /**
   * A streaming GET (Server-Sent Events): the timeout covers the answer's
   * head only; the body lasts until `signal` aborts or the server ends it.
   */
  async stream(call: Call): Promise<Response> {
    const attempt = new Attempt(this.timeoutMs, call.signal);
    let response: Response;
    try {
      response = await this.fetchImpl(this.target(call), {
        method: "GET",
        headers: { ...this.headers(false), Accept: "text/event-stream" },
        signal: attempt.controller.signal,
      });
    } catch (error) {
      attempt.end();
      throw attempt.failure(error);
    }
    attempt.stopTimer();
    if (!response.ok || !response.body) {
      let text = "";
      try {
        text = await response.text();
      } catch {
        // the status says enough
      }
      attempt.end();
      const body = parseJson(text) ?? { error: text.slice(0, 500) || response.statusText };
      throw errorFor(response.status, body, headersOf(response));
    }
    return response;
  }
}
