/**
 * Errors: keepmem's answers mapped to classes (live), the retry rules, the
 * timeout and connection failures (a fetch double where no server can be
 * made to misbehave on purpose).
 */

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { describe, it } from "node:test";

import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  Keepmem,
  KeepmemError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  ServiceUnavailableError,
  ValidationError,
  type FetchLike,
} from "@keepmem/client";

import { client, need, unique } from "./env.js";

function caught<T extends Error>(cls: abstract new (...args: never[]) => T) {
  return async (promise: Promise<unknown>): Promise<T> => {
    try {
      await promise;
    } catch (error) {
      assert.ok(error instanceof cls, `expected ${cls.name}, got ${String(error)}`);
      return error;
    }
    assert.fail(`expected ${cls.name}, nothing was thrown`);
  };
}

describe("errors from a live keepmem", () => {
  const km = client({ project: unique("ts-err") });

  it("404 is a NotFoundError with code and request id", async () => {
    const error = await caught(NotFoundError)(km.get("no-such-note"));
    assert.ok(error instanceof APIError && error instanceof KeepmemError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "note_not_found");
    assert.match(error.requestId ?? "", /\S/);
    assert.equal(error.headers["x-request-id"], error.requestId);
    assert.equal(error.name, "NotFoundError");
    assert.match(String(error), /^NotFoundError: 404 note_not_found: .*request_id=/);
  });

  it("400 is a BadRequestError", async () => {
    const error = await caught(BadRequestError)(km.put("x", { id: "bad;id" }));
    assert.equal(error.status, 400);
    assert.match(error.message, /invalid/);
  });

  it("422 is a ValidationError with the fields in detail", async () => {
    const error = await caught(ValidationError)(km.find("x", { limit: 100_000 }));
    assert.equal(error.status, 422);
    assert.ok(Array.isArray(error.detail));
  });

  it("401 is an AuthenticationError", async () => {
    const stranger = new Keepmem({ url: need("KEEPMEM_URL"), apiKey: "km_nope_" + "x".repeat(30) });
    const error = await caught(AuthenticationError)(stranger.get("anything"));
    assert.equal(error.status, 401);
    assert.equal(error.code, "unauthorized");
  });

  it("403 is a PermissionDeniedError", async () => {
    const reader = new Keepmem({ url: need("KEEPMEM_URL"), apiKey: need("KEEPMEM_READ_KEY") });
    const error = await caught(PermissionDeniedError)(reader.put("a reader may not write"));
    assert.equal(error.status, 403);
    assert.ok(error.code);
  });

  it("an unreachable server is an APIConnectionError, retried for reads only", async () => {
    const port = await closedPort();
    let calls = 0;
    const counting: FetchLike = (input, init) => {
      calls += 1;
      return fetch(input, init);
    };
    const km = new Keepmem({ url: `http://127.0.0.1:${port}`, apiKey: "k", maxRetries: 1, fetch: counting });
    await caught(APIConnectionError)(km.get("x"));
    assert.equal(calls, 2);
    calls = 0;
    await caught(APIConnectionError)(km.put("x"));
    assert.equal(calls, 1);
  });
});

/** A fetch double that answers from a script, one answer a call. */
function scripted(...answers: (Response | Error)[]): { fetch: FetchLike; calls: RequestInit[] } {
  const calls: RequestInit[] = [];
  return {
    calls,
    fetch: async (_input, init) => {
      calls.push(init);
      const next = answers.shift();
      if (next === undefined) throw new Error("the script ran out");
      if (next instanceof Error) throw next;
      return next;
    },
  };
}

function answer(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return new Response(text, { status, headers: { "content-type": "application/json", ...headers } });
}

describe("errors mapped by status", () => {
  const table: [number, abstract new (...args: never[]) => APIError][] = [
    [400, BadRequestError],
    [401, AuthenticationError],
    [403, PermissionDeniedError],
    [404, NotFoundError],
    [409, ConflictError],
    [413, PayloadTooLargeError],
    [422, ValidationError],
    [429, RateLimitError],
    [500, InternalServerError],
    [502, InternalServerError],
    [503, ServiceUnavailableError],
    [418, APIError],
  ];
  for (const [status, cls] of table) {
    it(`${status} is ${cls.name}`, async () => {
      const body = { error: "what went wrong", code: `code_${status}`, request_id: "req-1" };
      const script = scripted(answer(status, body));
      const km = new Keepmem({ url: "http://keepmem.test", maxRetries: 0, fetch: script.fetch });
      const error = await caught(cls)(km.put("x"));
      assert.equal(error.status, status);
      assert.equal(error.code, `code_${status}`);
      assert.equal(error.message, "what went wrong");
      assert.equal(error.requestId, "req-1");
    });
  }

  it("a proxy's page that is not keepmem's shape still maps by status", async () => {
    const script = scripted(new Response("<html>bad gateway</html>", { status: 502, headers: { "x-request-id": "rid" } }));
    const km = new Keepmem({ url: "http://keepmem.test", maxRetries: 0, fetch: script.fetch });
    const error = await caught(InternalServerError)(km.get("x"));
    assert.equal(error.code, "error");
    assert.equal(error.message, "<html>bad gateway</html>");
    assert.equal(error.requestId, "rid");
  });

  it("a ConflictError is never retried; a 503 on a read is", async () => {
    const conflict = scripted(answer(409, { error: "taken", code: "conflict", request_id: "r" }));
    const km = new Keepmem({ url: "http://keepmem.test", maxRetries: 3, fetch: conflict.fetch });
    await caught(ConflictError)(km.get("x"));
    assert.equal(conflict.calls.length, 1);
    const note = { id: "x", summary: "s", tags: {}, created_at: "c", updated_at: "u", pending: [] };
    const flaky = scripted(answer(503, { error: "down", code: "unavailable", request_id: "r" }), answer(200, note));
    const retried = new Keepmem({ url: "http://keepmem.test", maxRetries: 1, fetch: flaky.fetch });
    assert.equal((await retried.get("x")).id, "x");
    assert.equal(flaky.calls.length, 2);
  });

  it("a call that takes longer than timeoutMs is an APITimeoutError", async () => {
    let calls = 0;
    const hanging: FetchLike = (_input, init) => {
      calls += 1;
      return new Promise((_, reject) => {
        init.signal?.addEventListener("abort", () => reject(init.signal?.reason));
      });
    };
    const km = new Keepmem({ url: "http://keepmem.test", timeoutMs: 50, maxRetries: 1, fetch: hanging });
    const error = await caught(APITimeoutError)(km.get("x"));
    assert.ok(error instanceof APIConnectionError);
    assert.equal(calls, 2); // a read: retried once
  });

  it("a caller's abort is not wrapped nor retried", async () => {
    const hanging: FetchLike = (_input, init) =>
      new Promise((_, reject) => init.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    const km = new Keepmem({ url: "http://keepmem.test", fetch: hanging });
    const controller = new AbortController();
    const pending = km.request("GET", "/v1/health", { idempotent: true, signal: controller.signal });
    controller.abort(new Error("changed my mind"));
    await assert.rejects(pending, /changed my mind/);
  });
});

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  assert.ok(address && typeof address === "object");
  return address.port;
}
