import { basename } from "node:path";
import type { TorchModelConfig } from "../train/config.js";
import type { RunSummary } from "../train/summary.js";

/**
 * Which model a run trained, as reports and the dashboard name it. An embedded run is its preset;
 * a `model.backend: torch` run is its Hugging Face directory, the worker's device, dtype and
 * processes, LoRA or full fine-tuning, and the base weights' SHA-256 (its `preset` is a default
 * the run never used).
 */

const DASH = "–";

export function isTorchRun(s: RunSummary): boolean {
  return s.config?.model?.backend === "torch";
}

/** The model directory's name (`model.torch.path`, else the base model the run recorded). */
function modelName(s: RunSummary): string {
  const path = s.config?.model?.torch?.path ?? s.baseModel?.dir;
  return path ? basename(path) : DASH;
}

/** "torch cpu float32", with "×N" for N worker processes. */
function backendText(t: TorchModelConfig): string {
  return `torch ${t.device} ${t.dtype}${t.processes > 1 ? ` ×${t.processes}` : ""}`;
}

/** LoRA's alpha when the config left it to the worker's default (2 × rank). */
function loraAlpha(lora: NonNullable<TorchModelConfig["lora"]>): number {
  return lora.alpha ?? 2 * lora.rank;
}

function loraShort(lora: TorchModelConfig["lora"]): string {
  return lora ? `LoRA r${lora.rank}` : "full fine-tuning";
}

/** The base weights' hash, shortened to what tells two models apart at a glance; empty when not recorded. */
function hashShort(s: RunSummary): string {
  const sha = s.baseModel?.sha256;
  return sha ? ` sha256:${sha.slice(0, 8)}` : "";
}

/** One line for a table cell: `smollm2-135m-instruct (torch cpu float32, LoRA r16) sha256:1a2b3c4d`. */
export function torchModelText(s: RunSummary): string {
  const t = s.config.model.torch;
  return `${modelName(s)} (${backendText(t)}, ${loraShort(t.lora)})${hashShort(s)}`;
}

/**
 * The runs table's model column: headed "preset" while every run is embedded (as reports always
 * showed it), "model" once a torch run is among them.
 */
export function modelColumn(runs: readonly RunSummary[]): { head: string; cell: (s: RunSummary) => string } {
  if (!runs.some(isTorchRun)) return { head: "preset", cell: (s) => s.config?.model?.preset ?? DASH };
  return {
    head: "model",
    cell: (s) => (isTorchRun(s) ? torchModelText(s) : `embedded ${s.config?.model?.preset ?? DASH}`),
  };
}

/** The whole description, for a run's own page: every LoRA setting and the full hash. */
export function modelDetails(s: RunSummary): string[] {
  if (!isTorchRun(s)) return [`embedded model, preset ${s.config?.model?.preset ?? DASH}`];
  const t = s.config.model.torch;
  const lora = t.lora
    ? `LoRA rank ${t.lora.rank}, alpha ${loraAlpha(t.lora)}, dropout ${t.lora.dropout}, on ${t.lora.targetModules.join(", ")}`
    : "full fine-tuning (no LoRA)";
  const processes = `${t.processes} process${t.processes === 1 ? "" : "es"}`;
  return [
    `${modelName(s)}${t.path ? ` (${t.path})` : ""}`,
    `torch, ${t.device}, ${t.dtype}, ${processes}`,
    lora,
    s.baseModel?.sha256 ? `weights sha256 ${s.baseModel.sha256}` : "weights hash not recorded",
  ];
}
