/**
 * A loopback OpenAI-compatible server that misbehaves on purpose, for testing remote policies.
 *
 * It listens on 127.0.0.1 with an OS-chosen port, answers POST /v1/chat/completions, and picks
 * each request's behaviour from a script: by arrival number (0, 1, 2, ...; beyond the end of
 * the array it answers "ok") or by a function of the arrival number and the parsed body.
 * It records every request it received and the largest number of requests it held at once.
 * `close()` destroys open connections and pending timers, so a test never leaves it running.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type FaultBehaviour =
  /** 200 with content, logprobs and usage; optional delay before answering. */
  | {
      kind: "ok";
      text?: string;
      delayMs?: number;
      finishReason?: string;
      /** vLLM's `stop_reason` field. */
      stopReason?: string | null;
      /** Send logprob tokens as `token_id:N` (vLLM `return_tokens_as_token_ids`). */
      tokenIds?: boolean;
      /** Leave out `logprobs` from the choice. */
      noLogprobs?: boolean;
    }
  /** Any status with an error body, optional Retry-After header. */
  | { kind: "status"; status: number; retryAfter?: string; body?: string }
  /** Waits `delayMs` before answering ok (longer than the client's timeout). */
  | { kind: "slow"; delayMs: number }
  /** Sends headers and half a body, then destroys the connection. */
  | { kind: "drop" }
  /** Destroys the connection without answering at all. */
  | { kind: "hangup" }
  /** 200 with a body that is not JSON. */
  | { kind: "invalid-json" }
  /** 200 with `choices: []`. */
  | { kind: "empty-choices" };

export type FaultScript =
  | readonly FaultBehaviour[]
  | ((index: number, body: any) => FaultBehaviour | undefined);

export interface ReceivedRequest {
  index: number;
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  /** Parsed JSON body (undefined if it was not JSON). */
  body: any;
}

export interface FaultServer {
  /** e.g. http://127.0.0.1:41234/v1 */
  readonly baseUrl: string;
  readonly received: ReceivedRequest[];
  /** Most requests held open at the same time. */
  readonly maxInFlight: number;
  close(): Promise<void>;
}

export const ok = (extra: Omit<Extract<FaultBehaviour, { kind: "ok" }>, "kind"> = {}): FaultBehaviour => ({
  kind: "ok",
  ...extra,
});
export const status = (code: number, retryAfter?: string, body?: string): FaultBehaviour => ({
  kind: "status",
  status: code,
  retryAfter,
  body,
});
export const slow = (delayMs: number): FaultBehaviour => ({ kind: "slow", delayMs });
export const drop: FaultBehaviour = { kind: "drop" };
export const hangup: FaultBehaviour = { kind: "hangup" };
export const invalidJson: FaultBehaviour = { kind: "invalid-json" };
export const emptyChoices: FaultBehaviour = { kind: "empty-choices" };

/** Default answer text: echoes the last message so tests can match answers to requests. */
function defaultText(body: any): string {
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  const last = messages[messages.length - 1];
  return `echo:${typeof last?.content === "string" ? last.content : ""}`;
}

function okBody(body: any, b: Extract<FaultBehaviour, { kind: "ok" }>, index: number): string {
  const text = b.text ?? defaultText(body);
  // One "token" per character keeps counts easy to predict; logprob -0.1 * (position + 1).
  const chars = [...text];
  const content = chars.map((ch, i) => ({
    token: b.tokenIds ? `token_id:${ch.codePointAt(0)}` : ch,
    logprob: -0.1 * (i + 1),
    bytes: [...Buffer.from(ch)],
    top_logprobs: [],
  }));
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  const promptChars = messages.reduce(
    (n: number, m: any) => n + (typeof m?.content === "string" ? m.content.length : 0),
    0,
  );
  const choice: Record<string, unknown> = {
    index: 0,
    message: { role: "assistant", content: text },
    finish_reason: b.finishReason ?? "stop",
  };
  if (b.stopReason !== undefined) choice.stop_reason = b.stopReason;
  if (!b.noLogprobs && body?.logprobs) choice.logprobs = { content };
  return JSON.stringify({
    id: `chatcmpl-${index}`,
    object: "chat.completion",
    created: 0,
    model: body?.model ?? "unknown",
    choices: [choice],
    usage: {
      prompt_tokens: promptChars,
      completion_tokens: chars.length,
      total_tokens: promptChars + chars.length,
    },
  });
}

export async function startFaultServer(script: FaultScript = []): Promise<FaultServer> {
  const received: ReceivedRequest[] = [];
  const timers = new Set<NodeJS.Timeout>();
  const sockets = new Set<Socket>();
  let inFlight = 0;
  let maxInFlight = 0;

  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
  };

  const handle = (req: IncomingMessage, res: ServerResponse, raw: string) => {
    if (req.method !== "POST" || !req.url?.endsWith("/v1/chat/completions")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `no route ${req.method} ${req.url}` } }));
      return;
    }
    let body: any;
    try {
      body = JSON.parse(raw);
    } catch {
      body = undefined;
    }
    const index = received.length;
    received.push({ index, method: req.method, url: req.url, headers: req.headers, body });
    const behaviour: FaultBehaviour =
      (typeof script === "function" ? script(index, body) : script[index]) ?? ({ kind: "ok" } as const);

    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    res.on("close", () => inFlight--);

    const sendJson = (code: number, payload: string, headers: Record<string, string> = {}) => {
      if (res.destroyed) return;
      res.writeHead(code, { "content-type": "application/json", ...headers });
      res.end(payload);
    };

    switch (behaviour.kind) {
      case "ok":
        if (behaviour.delayMs) later(behaviour.delayMs, () => sendJson(200, okBody(body, behaviour, index)));
        else sendJson(200, okBody(body, behaviour, index));
        return;
      case "slow":
        later(behaviour.delayMs, () => sendJson(200, okBody(body, { kind: "ok" }, index)));
        return;
      case "status": {
        const headers: Record<string, string> = {};
        if (behaviour.retryAfter !== undefined) headers["retry-after"] = behaviour.retryAfter;
        const payload =
          behaviour.body ??
          JSON.stringify({ error: { message: `scripted failure ${behaviour.status}`, type: "test" } });
        sendJson(behaviour.status, payload, headers);
        return;
      }
      case "drop": {
        const full = okBody(body, { kind: "ok" }, index);
        res.writeHead(200, {
          "content-type": "application/json",
          "content-length": String(Buffer.byteLength(full)),
        });
        res.write(full.slice(0, Math.floor(full.length / 2)));
        // Let the partial body reach the client, then cut the connection.
        later(20, () => req.socket.destroy());
        return;
      }
      case "hangup":
        req.socket.destroy();
        return;
      case "invalid-json":
        sendJson(200, '{"id": "chatcmpl-broken", "choices": [ {"message": ');
        return;
      case "empty-choices":
        sendJson(
          200,
          JSON.stringify({ id: "chatcmpl-empty", object: "chat.completion", choices: [], usage: {} }),
        );
        return;
    }
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => handle(req, res, Buffer.concat(chunks).toString("utf8")));
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  let closed: Promise<void> | undefined;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    received,
    get maxInFlight() {
      return maxInFlight;
    },
    close() {
      closed ??= new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
      return closed;
    },
  };
}
