/** A torch run's summary for the report and dashboard tests (not a test file itself). */
import { validateConfig } from "../../src/train/config.js";
import type { RunSummary } from "../../src/train/summary.js";
import { makeSummary } from "./fixtures.js";

export const TORCH_SHA256 = `1a2b3c4d${"e".repeat(56)}`;

/** makeSummary's run, trained with `model.backend: torch` on a local SmolLM2 directory. */
export function torchSummary(name: string, torch: Record<string, unknown>): RunSummary {
  const s = makeSummary({ name });
  const plain = JSON.parse(JSON.stringify(s.config));
  const config = validateConfig({
    ...plain,
    model: { ...plain.model, backend: "torch", torch: { path: "/models/smollm2-135m-instruct/", ...torch } },
  });
  return {
    ...s,
    config,
    meta: { ...s.meta, kernels: "torch" },
    baseModel: { dir: "/models/smollm2-135m-instruct", sha256: TORCH_SHA256 },
  };
}
