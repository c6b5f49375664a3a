/**
 * @keepmem/client: keepmem's client for TypeScript and JavaScript, in Node
 * 20+ and browsers (fetch only, no dependencies).
 */

export { EventStream, Keepmem } from "./client.js";
export type { EventsParams, ListAllParams, PutOptions, RequestOptions } from "./client.js";
export {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  KeepmemError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  ServiceUnavailableError,
  ValidationError,
  errorFor,
} from "./errors.js";
export { DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_MS, DEFAULT_URL, VERSION } from "./http.js";
export type { FetchLike, KeepmemOptions, Query } from "./http.js";
export { parseEventStream } from "./sse.js";
export type { ServerSentEvent } from "./sse.js";
export type * from "./types.js";
export type { components, operations, paths } from "./openapi.js";
