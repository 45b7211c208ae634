// Compiled (tsc --strict) beside the types openapi-typescript generated from /v1/openapi.json:
// a client written against them, as a person would, with no edit to the generated file.
import type { components, operations, paths } from "./schema";

type Json<T> = T extends { content: { "application/json": infer Body } } ? Body : never;

type Started = Json<paths["/v1/sessions/{session_id}/messages"]["post"]["responses"][202]>;
export const started: Started = {
  run_id: "01ARZ3NDEKTSV4RRFFQ69G5FAV",
  session_id: "01ARZ3NDEKTSV4RRFFQ69G5FAW",
  session_created: false,
  queued: false,
};

// request bodies: only the required fields
export const message: Json<operations["sendMessage"]["requestBody"]> = { text: "hello" };
export const decision: components["schemas"]["DecisionRequest"] = { decision: "allow" };
export const posture: Json<operations["setSessionPosture"]["requestBody"]> = {
  tool: "shell.run",
  posture: null,
};

// every refusal is the one error body, its code one of the documented ones
type NotFound = Json<operations["getRun"]["responses"][404]>;
export const refused: NotFound = { error: { code: "not_found", message: "no such run" } };

// a tape entry's event is a union told apart by its kind
type Event = components["schemas"]["TapeEntry"]["event"];
export function kindOf(event: Event): string {
  return event.kind;
}

export const query: operations["listApprovals"]["parameters"]["query"] = { state: "pending" };
