/**
 * The pieces the env benches share to measure the protocol's share of a training iteration: a
 * random tiny base model, and one `mage train` run timed against the env client's busy clock.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Rng } from "../core/rng.js";
import { ENV_CLIENT_TOTALS } from "../env/client.js";
import { saveCheckpoint } from "../model/checkpoint.js";
import { presetConfig } from "../model/config.js";
import { initParams } from "../model/params.js";
import { paramsToMap } from "../model/params-io.js";
import { byteTokenizer } from "../model/tokenizer.js";
import type { MageConfig } from "../train/config.js";
import { train } from "../train/trainer.js";

/** A tiny embedded model with seeded random weights, saved as `dir` (the benches' base). */
export async function saveBenchBase(dir: string): Promise<void> {
  const tok = byteTokenizer();
  const model = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 1024 });
  await saveCheckpoint(dir, {
    config: model,
    params: paramsToMap(initParams(model, Rng.seeded("bench-env-model"))),
    tokenizer: tok,
  });
}

/** Mean rollout and update ms per iteration of a run, and the env client's busy ms per iteration. */
export async function timedTrain(
  config: MageConfig,
  out: string,
): Promise<{ rollout: number; update: number; busyPerIt: number }> {
  const before = ENV_CLIENT_TOTALS.busyMs;
  await train({ config, outDir: out, resume: false, progress: false, log: () => {} });
  const busy = ENV_CLIENT_TOTALS.busyMs - before;
  const metrics = readFileSync(join(out, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, number>);
  return {
    rollout: metrics.reduce((s, m) => s + m.rollout_ms, 0) / metrics.length,
    update: metrics.reduce((s, m) => s + (m.update_ms ?? 0), 0) / metrics.length,
    // The busy time includes the final evaluation's one trial (a few ms): an upper bound.
    busyPerIt: busy / metrics.length,
  };
}
