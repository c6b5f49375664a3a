/**
 * A real 429: a keepmem whose per-key bucket is small (KEEPMEM_LIMITED_URL,
 * 60 a minute: one token a second, so `Retry-After` is 1). A read waits
 * `Retry-After` and succeeds; without retries, or for a write, the
 * RateLimitError reaches the caller.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Keepmem, RateLimitError } from "@keepmem/client";

import { need, recordingFetch } from "./env.js";

const url = () => need("KEEPMEM_LIMITED_URL");
const apiKey = () => need("KEEPMEM_LIMITED_KEY");

/** Spend the key's bucket: calls without retries until one is refused. */
async function drain(): Promise<RateLimitError> {
  const km = new Keepmem({ url: url(), apiKey: apiKey(), maxRetries: 0 });
  for (let i = 0; i < 1000; i++) {
    try {
      await km.list({ limit: 1 });
    } catch (error) {
      if (error instanceof RateLimitError) return error;
      throw error;
    }
  }
  assert.fail("the limited server never answered 429");
}

describe("rate limits", { concurrency: false }, () => {
  it("without retries, a 429 is a RateLimitError with retryAfter", async () => {
    const error = await drain();
    assert.equal(error.status, 429);
    assert.equal(error.code, "rate_limited");
    assert.ok(error.requestId);
    assert.equal(error.retryAfter, 1);
    assert.equal(error.headers["x-ratelimit-remaining"], "0");
  });

  it("a read is retried after Retry-After and succeeds", async () => {
    await drain();
    const spy = recordingFetch();
    const km = new Keepmem({ url: url(), apiKey: apiKey(), maxRetries: 2, fetch: spy.fetch });
    const page = await km.list({ limit: 1 });
    assert.ok(Array.isArray(page.notes));
    assert.deepEqual(
      spy.seen.map((s) => s.status),
      [429, 200],
    );
    const [refused, passed] = spy.seen;
    // It waited what the server asked (1 s), not the shorter jittered backoff.
    assert.ok(refused && passed && passed.at - refused.at >= 950, `retried after ${passed!.at - refused!.at} ms`);
  });

  it("a write is never retried: the 429 reaches the caller", async () => {
    await drain();
    const spy = recordingFetch();
    const km = new Keepmem({ url: url(), apiKey: apiKey(), maxRetries: 2, fetch: spy.fetch });
    await assert.rejects(km.put("refused"), RateLimitError);
    assert.deepEqual(
      spy.seen.map((s) => s.status),
      [429],
    );
  });
});
