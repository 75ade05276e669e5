/**
 * Request bodies with a size limit, for `mage serve` and `mage env-serve` (the dashboard takes no
 * bodies). Past the limit, declared in Content-Length or counted as it arrives, nothing more is
 * kept and the rest of the body is read and thrown away. On a keep-alive connection the read fails
 * at once, so the 413 goes out while the client is still sending; a client that asked for
 * `Connection: close` gets it once its body has ended, because node:http closes such a connection
 * right after the answer and a client still writing then sees a reset instead of the 413 (2 of 4
 * 64 MiB uploads did). Past `drainBytes` thrown away the connection is cut; a slow sender is cut
 * by the servers' request timeout.
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
    const answerEarly = req.httpVersion === "1.1" && !/\bclose\b/i.test(String(req.headers.connection ?? ""));
    const tooLarge = () => {
      over = true;
      chunks.length = 0;
      if (answerEarly) reject(new BodyTooLargeError(limit));
    };
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > limit) tooLarge();
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (over) {
        if (size > limit + drainBytes) {
          req.socket.destroy();
          reject(new BodyTooLargeError(limit));
        }
        return;
      }
      if (size > limit) tooLarge();
      else chunks.push(c);
    });
    req.on("end", () => (over ? reject(new BodyTooLargeError(limit)) : resolve(Buffer.concat(chunks))));
    req.on("error", reject);
    req.on("close", () => reject(new Error("the client closed the connection before its body ended")));
  });
}
