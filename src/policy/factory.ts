import { loadCheckpoint } from "../model/checkpoint.js";
import { selectKernels } from "../model/kernels/select.js";
import { paramsFromMap } from "../model/params-io.js";
import { EmbeddedPolicy } from "./embedded.js";
import { OpenAIChatPolicy } from "./openai.js";
import { parsePolicySpec } from "./spec.js";
import type { Policy } from "./types.js";

export interface OpenedPolicy {
  policy: Policy;
  /** "embedded", "openai" or "gguf". */
  kind: string;
  /** Prompt style that suits it: compact for our embedded model, full for real LLMs. */
  promptStyle: "compact" | "full";
  /** GEMM kernels that ran (embedded only). */
  kernels?: string;
  close(): Promise<void>;
}

/** Builds a Policy from a spec: `checkpoint:DIR` (or a directory), `openai:URL#MODEL`, `gguf:PATH`. */
export async function openPolicy(spec: string, opts: { kernels?: string } = {}): Promise<OpenedPolicy> {
  const parsed = parsePolicySpec(spec);
  switch (parsed.kind) {
    case "checkpoint": {
      const ck = await loadCheckpoint(parsed.dir);
      const kernels = await selectKernels(opts.kernels ?? "auto");
      const policy = new EmbeddedPolicy({
        params: paramsFromMap(ck.config, ck.params),
        tokenizer: ck.tokenizer,
        kernels,
        name: `embedded:${parsed.dir}`,
      });
      return {
        policy,
        kind: "embedded",
        promptStyle: "compact",
        kernels: kernels.name,
        close: async () => {},
      };
    }
    case "openai": {
      const policy = new OpenAIChatPolicy(parsed.options);
      return { policy, kind: "openai", promptStyle: "full", close: async () => {} };
    }
    case "gguf": {
      const { GgufPolicy } = await import("./gguf.js");
      const policy = await GgufPolicy.load({ path: parsed.path });
      return { policy, kind: "gguf", promptStyle: "full", close: () => policy.close() };
    }
  }
}
