/**
 * A loopback environment server that misbehaves on purpose, for testing the `game: remote`
 * client. It forwards each request to a real `mage env-serve` (the upstream) unless its script
 * says otherwise for that request: a status with an error body, a hang (no answer until closed),
 * a body that is not JSON, a reply with a required field removed, a session that vanished
 * (404 unknown_session), or a /restart reply whose fingerprint is changed. It records every
 * request (path, parsed body) and the most requests it held at once.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type EnvFault =
  | { kind: "forward" }
  | { kind: "status"; status: number; body?: string }
  | { kind: "hang" }
  | { kind: "invalid-json" }
  | { kind: "drop-field"; field: string }
  | { kind: "vanish" }
  | { kind: "other-fingerprint" }
  | { kind: "slow"; delayMs: number };

export interface EnvRequest {
  index: number;
  path: string;
  body: any;
}

/** Chooses each request's behaviour from its arrival index, path and body (undefined: forward). */
export type EnvFaultScript = (req: EnvRequest) => EnvFault | undefined;

export interface FaultEnvServer {
  readonly url: string;
  readonly received: EnvRequest[];
  readonly maxInFlight: number;
  count(path: string): number;
  close(): Promise<void>;
}

export async function startFaultEnvServer(upstream: string, script: EnvFaultScript): Promise<FaultEnvServer> {
  const received: EnvRequest[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let inFlight = 0;
  let maxInFlight = 0;

  const forward = async (req: IncomingMessage, text: string): Promise<{ status: number; text: string }> => {
    const res = await fetch(upstream + req.url, {
      method: req.method,
      ...(req.method === "POST" ? { body: text, headers: { "content-type": "application/json" } } : {}),
    });
    return { status: res.status, text: await res.text() };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse, text: string) => {
    let body: any;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    const r: EnvRequest = { index: received.length, path: (req.url ?? "/").split("?")[0], body };
    received.push(r);
    const fault = script(r) ?? { kind: "forward" };
    const send = (status: number, out: string) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(out);
    };
    switch (fault.kind) {
      case "hang":
        return; // never answered; close() destroys the socket
      case "status":
        return send(
          fault.status,
          fault.body ?? JSON.stringify({ error: { kind: "internal", message: "injected failure" } }),
        );
      case "invalid-json":
        return send(200, "<html>502 Bad Gateway</html>");
      case "vanish":
        return send(
          404,
          JSON.stringify({
            error: { kind: "unknown_session", message: `no session "${body?.session}" (injected)` },
          }),
        );
      case "slow":
        await new Promise<void>((resolve) => {
          const t = setTimeout(() => {
            timers.delete(t);
            resolve();
          }, fault.delayMs);
          timers.add(t);
        });
        break;
      default:
        break;
    }
    const up = await forward(req, text);
    if (fault.kind === "drop-field" || fault.kind === "other-fingerprint") {
      const json = JSON.parse(up.text);
      if (fault.kind === "drop-field") delete json[fault.field];
      else json.fingerprint = `${json.fingerprint}-elsewhere`;
      return send(up.status, JSON.stringify(json));
    }
    send(up.status, up.text);
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      res.on("close", () => inFlight--);
      handle(req, res, Buffer.concat(chunks).toString("utf8")).catch((err) => {
        if (!res.headersSent) {
          res.writeHead(500);
          res.end(String(err));
        }
      });
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    get maxInFlight() {
      return maxInFlight;
    },
    count: (path) => received.filter((r) => r.path === path).length,
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
