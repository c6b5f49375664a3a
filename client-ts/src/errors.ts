/**
 * The SDK's errors: one tree, the Python SDK's (keepmem_client._errors).
 *
 *     KeepmemError
 *     ├── APIConnectionError            the server could not be reached
 *     │   └── APITimeoutError           ... or did not answer in time
 *     └── APIError                      the server answered with an error
 *         ├── BadRequestError           400 (a rule, or text that cannot be stored)
 *         ├── AuthenticationError       401
 *         ├── PermissionDeniedError     403
 *         ├── NotFoundError             404
 *         ├── ConflictError             409
 *         ├── PayloadTooLargeError      413
 *         ├── ValidationError           422 (the request does not match the schema)
 *         ├── RateLimitError            429 (`retryAfter` seconds)
 *         └── InternalServerError       5xx
 *             └── ServiceUnavailableError   503 (database or model provider down)
 *
 * Every `APIError` carries `status`, `code` (stable, e.g. `note_not_found`),
 * `message` and `requestId` (quote it when reporting a problem).
 */

/** Base of every error the SDK raises. */
export class KeepmemError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    // The class's own name, also after a bundler renamed it.
    Object.defineProperty(this, "name", { value: new.target.errorName, enumerable: false });
  }

  static readonly errorName: string = "KeepmemError";
}

/** The request did not reach keepmem, or no answer came back. */
export class APIConnectionError extends KeepmemError {
  static override readonly errorName: string = "APIConnectionError";
}

/** keepmem did not answer within the timeout. */
export class APITimeoutError extends APIConnectionError {
  static override readonly errorName: string = "APITimeoutError";
}

/** keepmem answered with an error status. */
export class APIError extends KeepmemError {
  static override readonly errorName: string = "APIError";
  /** The HTTP status. */
  readonly status: number;
  /** keepmem's stable error code (`note_not_found`, `rate_limited`, ...). */
  readonly code: string;
  /** The request's id (the body's `request_id`, else the `X-Request-ID` header). */
  readonly requestId: string | undefined;
  /** Per-field validation errors (422), when the server sent them. */
  readonly detail: unknown;
  /** The response's headers (lower-case names). */
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    code: string,
    message: string,
    requestId?: string,
    detail?: unknown,
    headers: Record<string, string> = {},
  ) {
    // `message` is the server's own words (the body's `error`), as the
    // Python SDK's `.message`; `toString()` adds the status, code and id.
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
    this.detail = detail;
    this.headers = headers;
  }

  override toString(): string {
    const id = this.requestId ? ` (request_id=${this.requestId})` : "";
    return `${this.name}: ${this.status} ${this.code}: ${this.message}${id}`;
  }
}

export class BadRequestError extends APIError {
  static override readonly errorName: string = "BadRequestError";
}

export class AuthenticationError extends APIError {
  static override readonly errorName: string = "AuthenticationError";
}

export class PermissionDeniedError extends APIError {
  static override readonly errorName: string = "PermissionDeniedError";
}

export class NotFoundError extends APIError {
  static override readonly errorName: string = "NotFoundError";
}

export class ConflictError extends APIError {
  static override readonly errorName: string = "ConflictError";
}

export class PayloadTooLargeError extends APIError {
  static override readonly errorName: string = "PayloadTooLargeError";
}

export class ValidationError extends APIError {
  static override readonly errorName: string = "ValidationError";
}

export class RateLimitError extends APIError {
  static override readonly errorName: string = "RateLimitError";

  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  get retryAfter(): number | undefined {
    const value = this.headers["retry-after"];
    if (value === undefined) return undefined;
    const seconds = Number(value);
    return Number.isFinite(seconds) ? seconds : undefined;
  }
}

export class InternalServerError extends APIError {
  static override readonly errorName: string = "InternalServerError";
}

export class ServiceUnavailableError extends InternalServerError {
  static override readonly errorName: string = "ServiceUnavailableError";
}

type APIErrorClass = new (
  status: number,
  code: string,
  message: string,
  requestId?: string,
  detail?: unknown,
  headers?: Record<string, string>,
) => APIError;

const BY_STATUS: Record<number, APIErrorClass> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: ValidationError,
  429: RateLimitError,
  503: ServiceUnavailableError,
};

function text(value: unknown): string | undefined {
  if (value === undefined || value === null || value === "") return undefined;
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * The error for an error response: keepmem's one error shape
 * (`{"error", "code", "request_id", "detail"?}`), or anything a proxy in
 * between sent (then the status alone decides).
 */
export function errorFor(status: number, body: unknown, headers: Record<string, string>): APIError {
  const fields = typeof body === "object" && body !== null && !Array.isArray(body)
    ? (body as Record<string, unknown>)
    : {};
  const message = text(fields["error"]) ?? text(fields["detail"]) ?? `HTTP ${status}`;
  const code = text(fields["code"]) ?? "error";
  const requestId = text(fields["request_id"]) ?? headers["x-request-id"];
  const cls = BY_STATUS[status] ?? (status >= 500 ? InternalServerError : APIError);
  return new cls(status, code, message, requestId, fields["detail"], headers);
}
