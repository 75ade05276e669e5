/** Writing `mage serve`'s answers: JSON bodies, OpenAI-style errors and server-sent event streams. */
import type { IncomingMessage, ServerResponse } from "node:http";
import { BodyTooLargeError, readLimitedBody } from "./http-body.js";
import { ApiError } from "./protocol.js";

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  extra: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    ...extra,
  });
  res.end(text);
}

export function sendError(res: ServerResponse, err: ApiError, extra: Record<string, string> = {}): void {
  if (res.headersSent) {
    // A stream already under way: say what went wrong as its last event.
    if (String(res.getHeader("content-type") ?? "").startsWith("text/event-stream") && !res.writableEnded)
      res.write(`data: ${JSON.stringify(err.body())}\n\n`);
    res.end();
    return;
  }
  sendJson(res, err.status, err.body(), extra);
}

/**
 * The request body parsed as JSON: past `limit` bytes an OpenAI-style 413 at once (the rest is
 * drained, not kept), a body that is not JSON a 400.
 */
export async function readJsonBody(req: IncomingMessage, limit: number): Promise<unknown> {
  let raw: Buffer;
  try {
    raw = await readLimitedBody(req, limit);
  } catch (err) {
    if (!(err instanceof BodyTooLargeError)) throw err;
    throw new ApiError(
      413,
      `request body exceeds ${limit} bytes`,
      "invalid_request_error",
      null,
      "request_too_large",
    );
  }
  try {
    return JSON.parse(raw.toString("utf8"));
  } catch {
    throw new ApiError(
      400,
      "the request body is not valid JSON",
      "invalid_request_error",
      null,
      "invalid_json",
    );
  }
}

export function startSse(res: ServerResponse): void {
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
  });
}

export function writeSse(res: ServerResponse, obj: unknown): void {
  res.write(`data: ${JSON.stringify(obj)}\n\n`);
}

export function endSse(res: ServerResponse): void {
  res.end("data: [DONE]\n\n");
}
