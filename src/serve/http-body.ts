/**
 * Request bodies with a size limit, for the three servers (`mage serve`, `mage env-serve`; the
 * dashboard takes no bodies). Past the limit, declared in Content-Length or counted as it
 * arrives, the read fails at once and nothing more is kept; the rest of the body is still read
 * and thrown away (at most `drainBytes` more, then the connection is cut), because a client that
 * is still sending when the connection closes sees a reset instead of the 413 answer.
 */
import type { IncomingMessage } from "node:http";

/**
 * node:http server options for clients that stall: headers within 10 s, the whole request within
 * 60 s (the response may take as long as it takes), checked every second.
 */
export const STALL_LIMITS = {
  headersTimeout: 10_000,
  requestTimeout: 60_000,
  connectionsCheckingInterval: 1000,
};

export class BodyTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`request body over ${limit} bytes`);
    this.name = "BodyTooLargeError";
  }
}

/** Bytes of an oversize body read and discarded before the connection is cut (default 256 MiB). */
export const DEFAULT_DRAIN_BYTES = 256 * 1024 * 1024;

export function readLimitedBody(
  req: IncomingMessage,
  limit: number,
  drainBytes: number = DEFAULT_DRAIN_BYTES,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    let drained = 0;
    const tooLarge = () => {
      over = true;
      chunks.length = 0;
      reject(new BodyTooLargeError(limit));
    };
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > limit) tooLarge();
    req.on("data", (c: Buffer) => {
      if (over) {
        drained += c.length;
        if (drained > drainBytes) req.socket.destroy();
        return;
      }
      size += c.length;
      if (size > limit) tooLarge();
      else chunks.push(c);
    });
    req.on("end", () => {
      if (!over) resolve(Buffer.concat(chunks));
    });
    req.on("error", (err) => {
      if (!over) reject(err);
    });
  });
}
