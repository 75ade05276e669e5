/**
 * A loopback stand-in for a vLLM OpenAI-compatible server, for testing rollouts from a server
 * while the PyTorch worker trains. It answers POST /v1/chat/completions with a fixed reply whose
 * tokens are its UTF-8 bytes (reported as `token_id:N`, the form vLLM uses with
 * `return_tokens_as_token_ids`; byte ids are valid in mage's byte tokenizer) and deliberately
 * wrong log-probs (-0.5 each), and records every call to the weight-update endpoints
 * (`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`, `/collective_rpc`, `/reset_prefix_cache`)
 * together with what was on disk at that moment (for `/collective_rpc`: in the directory its
 * first argument names, else in `weightsDir`). GET /v1/models answers as vLLM's does once it is
 * ready.
 */
import { existsSync, readdirSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface RecordedCall {
  path: string;
  body: any;
  /** For load_lora_adapter: the files in lora_path when the call arrived (collective_rpc: see above). */
  files?: string[];
}

export interface FakeVllm {
  readonly baseUrl: string;
  readonly calls: RecordedCall[];
  close(): Promise<void>;
}

export const FAKE_REPLY = "I bet.";
export const FAKE_LOGPROB = -0.5;

export async function startFakeVllm(
  opts: {
    weightsDir?: string;
    port?: number;
    onCall?: (call: RecordedCall) => void;
    /** Gets an access-log line per request, as uvicorn's: `"POST /path HTTP/1.1" 200 {body}`. */
    log?: (line: string) => void;
  } = {},
): Promise<FakeVllm> {
  const calls: RecordedCall[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      let body: any;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        body = undefined;
      }
      const path = req.url ?? "";
      const call: RecordedCall = { path, body };
      if (opts.log)
        res.on("finish", () =>
          opts.log?.(
            `INFO:     "${req.method} ${path} HTTP/1.1" ${res.statusCode} ${JSON.stringify(body ?? null)}`,
          ),
        );
      const json = (code: number, payload: unknown) => {
        res.writeHead(code, { "content-type": "application/json" });
        res.end(JSON.stringify(payload));
      };
      if (req.method === "GET" && path === "/v1/models") {
        return json(200, { object: "list", data: [{ id: "base", object: "model" }] });
      }
      if (req.method === "POST" && path === "/v1/chat/completions") {
        calls.push(call);
        opts.onCall?.(call);
        const bytes = [...Buffer.from(FAKE_REPLY, "utf8")];
        json(200, {
          id: `chatcmpl-${calls.length}`,
          object: "chat.completion",
          model: body?.model,
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: FAKE_REPLY },
              finish_reason: "stop",
              logprobs: body?.logprobs
                ? {
                    content: bytes.map((b) => ({
                      token: `token_id:${b}`,
                      logprob: FAKE_LOGPROB,
                      top_logprobs: [],
                    })),
                  }
                : null,
            },
          ],
          usage: { prompt_tokens: 10, completion_tokens: bytes.length, total_tokens: 10 + bytes.length },
        });
        return;
      }
      if (req.method === "POST" && path === "/v1/load_lora_adapter") {
        const p = body?.lora_path;
        call.files = typeof p === "string" && existsSync(p) ? readdirSync(p).sort() : [];
        calls.push(call);
        if (call.files.length === 0) return json(400, { error: { message: `no adapter at ${p}` } });
        res.writeHead(200, { "content-type": "text/plain" });
        res.end(`Success: LoRA adapter '${body.lora_name}' added successfully.`);
        return;
      }
      if (req.method === "POST" && path === "/v1/unload_lora_adapter") {
        calls.push(call);
        res.writeHead(200, { "content-type": "text/plain" });
        res.end(`Success: LoRA adapter '${body?.lora_name}' removed successfully.`);
        return;
      }
      if (req.method === "POST" && path === "/collective_rpc") {
        const arg = Array.isArray(body?.args) ? body.args[0] : undefined;
        const dir = typeof arg === "string" ? arg : opts.weightsDir;
        call.files = dir && existsSync(dir) ? readdirSync(dir).sort() : [];
        calls.push(call);
        if (typeof arg === "string" && call.files.length === 0)
          return json(500, { error: { message: `no weights at ${arg}` } });
        return json(200, { results: [typeof arg === "string" ? { seconds: 0.01, retied: false } : null] });
      }
      if (req.method === "POST" && path === "/reset_prefix_cache") {
        calls.push(call);
        return json(200, { success: true });
      }
      json(404, { error: { message: `no route ${req.method} ${path}` } });
    });
  });
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, "127.0.0.1", () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
