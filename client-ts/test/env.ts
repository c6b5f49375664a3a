/**
 * The live keepmem the tests call, as tests/test_ts_sdk.py starts it:
 * KEEPMEM_URL and KEEPMEM_API_KEY (an admin key of a fresh tenant),
 * KEEPMEM_READ_KEY (a read-only key of it), KEEPMEM_OTHER_KEY (another
 * tenant's key) and KEEPMEM_LIMITED_URL / KEEPMEM_LIMITED_KEY (a server with
 * a low per-key rate limit, for 429s).
 */

import { Keepmem, type KeepmemOptions } from "@keepmem/client";

export function need(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through tests/test_ts_sdk.py`);
  return value;
}

/** A client of the live server with the test tenant's admin key. */
export function client(options: KeepmemOptions = {}): Keepmem {
  return new Keepmem({ url: need("KEEPMEM_URL"), apiKey: need("KEEPMEM_API_KEY"), ...options });
}

/** Ids no other run or test shares. */
export function unique(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** A fetch that records each answer's status before handing it on. */
export function recordingFetch(): { fetch: KeepmemOptions["fetch"]; seen: { status: number; at: number }[] } {
  const seen: { status: number; at: number }[] = [];
  return {
    seen,
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      seen.push({ status: response.status, at: performance.now() });
      return response;
    },
  };
}
