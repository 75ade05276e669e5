/**
 * Optional bearer-token authentication shared by `mage serve`, `mage env-serve` and `mage
 * dashboard`: the key is compared in constant time (as SHA-256 digests, so lengths leak nothing)
 * and never logged.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";

function digest(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}

/** Whether `given` is the key (constant time). */
export function keyMatches(given: string, keyDigest: Buffer): boolean {
  return timingSafeEqual(digest(given), keyDigest);
}

/** A request check for `Authorization: Bearer KEY`; with no key every request passes. */
export function bearerCheck(key: string | null | undefined): (req: IncomingMessage) => boolean {
  if (!key) return () => true;
  const want = digest(key);
  return (req) => {
    const h = req.headers.authorization;
    if (typeof h !== "string" || !/^Bearer /i.test(h)) return false;
    return keyMatches(h.slice(7).trim(), want);
  };
}

export function keyDigest(key: string): Buffer {
  return digest(key);
}

/** Whether a listen address is reachable from this machine only. */
export function isLoopbackHost(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" || /^127\./.test(host);
}
