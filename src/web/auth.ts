/**
 * The dashboard's optional key. Scripts send `Authorization: Bearer KEY`; a browser opens any page
 * once with `?key=KEY` (as Jupyter's token links), gets a cookie and is sent on to the same page
 * without the key in its address. The cookie holds an HMAC of the key, not the key itself.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { bearerCheck, keyDigest, keyMatches } from "../serve/auth.js";

export const DASHBOARD_COOKIE = "mage_dashboard";

export type DashboardAccess =
  | { ok: true }
  /** A correct `?key=`: answer with a redirect to `location` that sets `cookie`. */
  | { ok: false; login: { location: string; cookie: string } }
  | { ok: false; login?: undefined };

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (typeof header !== "string") return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Decides each request's access; with no key every request is let in. */
export function dashboardAccess(
  key: string | null | undefined,
): (req: IncomingMessage, url: URL) => DashboardAccess {
  if (!key) return () => ({ ok: true });
  const bearer = bearerCheck(key);
  const digest = keyDigest(key);
  const token = createHmac("sha256", key).update("mage dashboard cookie").digest("hex");
  const tokenBuf = Buffer.from(token);
  return (req, url) => {
    if (bearer(req)) return { ok: true };
    const cookie = cookieOf(req, DASHBOARD_COOKIE);
    if (
      cookie !== undefined &&
      cookie.length === token.length &&
      timingSafeEqual(Buffer.from(cookie), tokenBuf)
    )
      return { ok: true };
    const given = url.searchParams.get("key");
    if (given === null || !keyMatches(given, digest)) return { ok: false };
    const rest = new URLSearchParams(url.searchParams);
    rest.delete("key");
    const query = rest.toString();
    return {
      ok: false,
      login: {
        location: `${url.pathname}${query ? `?${query}` : ""}`,
        // Kept a week (a session cookie would go with the browser); a new key invalidates it.
        cookie: `${DASHBOARD_COOKIE}=${token}; HttpOnly; SameSite=Strict; Path=/; Max-Age=604800`,
      },
    };
  };
}
