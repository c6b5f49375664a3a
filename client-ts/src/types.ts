/**
 * Names for the shapes the client takes and returns, picked from the types
 * generated from keepmem's OpenAPI document (openapi.ts, `npm run generate`):
 * the document stays the one source, and these names stay stable when the
 * generator's output moves.
 *
 * Hand-finished: the generator marks every field that has a default as
 * required (right for answers, which always carry them); a request body's
 * such fields are optional here, as the server treats them.
 */

import type { components, operations } from "./openapi.js";

/** Every schema of the OpenAPI document, by its name there. */
export type Schemas = components["schemas"];

/** A note as the API answers it. */
export type Note = Schemas["NoteOut"];
/** A find's hit: a note with its score (and citation, when asked). */
export type ScoredNote = Schemas["ScoredNote"];
/** One page of `GET /v1/notes`. */
export type NotePage = Schemas["NoteList"];
/** The body of `POST /v1/notes` (one note of `putMany`). */
export type PutNote = Partial<Schemas["PutRequest"]>;
/** The answer of `POST /v1/notes/batch`: one result per note sent, in order. */
export type BatchOut = Schemas["BatchOut"];
/** The body of `POST /v1/search`. */
export type FindParams = Partial<Schemas["SearchRequest"]>;
/** The answer of `POST /v1/search`. */
export type SearchResult = Schemas["SearchResponse"];
/** `GET /v1/notes/{id}/versions`: archived versions, newest first. */
export type VersionList = Schemas["VersionList"];
/** One archived version. */
export type Version = VersionList["versions"][number];
/** The body of `PATCH /v1/notes/{id}/tags`. */
export type TagChange = Partial<Schemas["TagRequest"]>;
/** The answer of `DELETE /v1/notes/{id}`. */
export type Deleted = Schemas["DeleteOut"];
/** The body of `POST /v1/memories`. */
export type RememberParams = Partial<Schemas["RememberIn"]> & { statement: string };
/** The answer of `POST /v1/memories`: what was done (`op`) and the memory. */
export type Remembered = Schemas["RememberOut"];
/** A memory (`mem/...`); reached through its list, whose name is stable
 * where the schema's own may be qualified (another `MemoryOut` elsewhere). */
export type Memory = Schemas["MemoryList"]["memories"][number];
/** The project's settings (`GET /v1/settings`). */
export type ProjectSettings = Schemas["ProjectSettings"];
/** A change of settings (`PATCH /v1/settings`, an admin key). */
export type SettingsChange = Partial<Schemas["SettingsChange"]>;
/** Every error body: `{"error", "code", "request_id", "detail"?}`. */
export type ErrorBody = Schemas["ErrorOut"];

type Query<Op extends keyof operations> = NonNullable<operations[Op]["parameters"]["query"]>;

/** The query of `GET /v1/memories`. */
export type MemoriesQuery = Query<"list_memories_v1_memories_get">;

/** A tag value: one string, or several (a multi-valued tag). */
export type Tags = Record<string, string | string[]>;

/** Filters of `list`, `pages` and `listAll` (`GET /v1/notes`). */
export interface ListParams {
  /** Id prefix, or a glob (`*`, `?`, `[]`). */
  prefix?: string;
  /** `key: value` the notes must hold (all of them). */
  tags?: Record<string, string>;
  /** Tag keys the notes must hold. */
  tagKeys?: string[];
  /** ISO-8601 duration (`P3D`) or date. */
  since?: string;
  until?: string;
  orderBy?: "updated" | "accessed" | "created" | "id";
  /** Notes on the page (1-1000; the server's default 20). */
  limit?: number;
  /** `next_cursor` of the previous page. */
  cursor?: string;
  /** Include system notes (ids starting with `.`). */
  includeHidden?: boolean;
}

/** One change to the project, as `GET /v1/events` sends it (the JSON `data`). */
export interface ChangeEvent {
  /** The event's id (opaque): resume after it with `after`. */
  id: string;
  /** put, tag, delete, move, revert, summary, embedding, parts, failed. */
  kind: string;
  note_id: string | null;
  project: string;
  /** When the change was made (ISO-8601). */
  at: string;
  summary: string | null;
  tags: Record<string, unknown>;
  detail: Record<string, unknown>;
}
