import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { TorchLearner } from "../../src/learner/torch/learner.js";
import { runPythonModule } from "../../src/learner/torch/python-module.js";
import { presetConfig } from "../../src/model/config.js";
import { exportGguf } from "../../src/model/gguf.js";
import { exportHf } from "../../src/model/hf-export.js";
import { initParams } from "../../src/model/params.js";
import { paramsToMap } from "../../src/model/params-io.js";
import { parseSafetensors } from "../../src/model/safetensors.js";
import { trainTokenizer } from "../../src/model/tokenizer.js";
import { nodeLlamaCppAvailable } from "../../src/policy/gguf.js";
import { llamaCppGreedy } from "../../src/policy/gguf-greedy.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { TorchModelSchema } from "../../src/train/config.js";
import { NO_WORKER } from "../learner/tiny-hf.js";

const LLAMA = (await nodeLlamaCppAvailable()) ? false : "needs node-llama-cpp";
const OPT = { lr: 1e-5, weightDecay: 0, gradClip: 1 };

/** Greedy continuations of chat prompts by the worker on `dir` and by llama.cpp on `gguf`, from the same ids. */
async function bothGreedy(dir: string, gguf: string, chats: ChatMessage[][], maxNew: number) {
  const learner = await TorchLearner.open({
    torch: TorchModelSchema.parse({ path: dir }),
    optimizer: OPT,
    seed: 0,
    reference: false,
  });
  try {
    const prompts = (await learner.renderMany(chats, true)).map((r) => r.ids);
    const ours = await learner.generate(
      prompts,
      prompts.map(() => ({ maxNewTokens: maxNew, temperature: 0, topP: 1, topK: 0, seed: 0, stop: [] })),
    );
    const eos = new Set(learner.info.eosTokenIds);
    // llama.cpp's stream ends before an end-of-generation token; the worker returns it last.
    const torch = ours.map((o) => o.tokens.filter((t, i) => !(i === o.tokens.length - 1 && eos.has(t))));
    const llama = await llamaCppGreedy(gguf, prompts, maxNew);
    return { torch, llama: llama.map((l) => l.filter((t) => !eos.has(t))) };
  } finally {
    await learner.close();
  }
}

async function tensors(file: string) {
  return parseSafetensors(new Uint8Array(await readFile(file))).tensors;
}

describe("mage import-gguf on an embedded model's GGUF", { skip: NO_WORKER || LLAMA }, () => {
  let root: string;
  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-import-gguf-"));
    const tok = trainTokenizer(
      ["the quick brown fox jumps over the lazy dog. <action>BET</action> <action>CHECK</action>"],
      {
        vocabSize: 300,
      },
    );
    const config = presetConfig("tiny", { vocabSize: tok.vocabSize, contextLength: 256, nLayers: 2 });
    const params = paramsToMap(initParams(config, Rng.seeded(3)));
    await exportGguf(join(root, "tiny.gguf"), { config, params, tokenizer: tok, type: "F32" });
    await exportHf(join(root, "exported"), { config, params, tokenizer: tok });
    const run = await runPythonModule("mage_learner.import_gguf", [
      "--gguf",
      join(root, "tiny.gguf"),
      "--out",
      join(root, "imported"),
    ]);
    assert.equal(run.code, 0);
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  it("holds exactly the weights export-hf writes (llama.cpp's Q/K row order undone)", async () => {
    const a = await tensors(join(root, "exported", "model.safetensors"));
    const b = await tensors(join(root, "imported", "model.safetensors"));
    assert.deepEqual([...b.keys()].sort(), [...a.keys()].sort());
    for (const [name, t] of a) assert.deepEqual(b.get(name)?.data, t.data, name);
  });

  it("continues prompts greedily as llama.cpp does on the same GGUF", async () => {
    const chats: ChatMessage[][] = ["the quick", "lazy dog", "<action>BET</action>", "fox"].map((c) => [
      { role: "user", content: c },
    ]);
    const { torch, llama } = await bothGreedy(join(root, "imported"), join(root, "tiny.gguf"), chats, 24);
    assert.deepEqual(torch, llama);
    assert.ok(torch.every((t) => t.length > 0));
  });

  it("refuses a file that is not a GGUF and an --out that is not an import, naming the flag", async () => {
    const notGguf = await runPythonModule("mage_learner.import_gguf", [
      "--gguf",
      join(root, "exported", "config.json"),
      "--out",
      join(root, "x"),
    ]);
    assert.equal(notGguf.code, 2);
    const taken = await runPythonModule("mage_learner.import_gguf", [
      "--gguf",
      join(root, "tiny.gguf"),
      "--out",
      join(root, "exported"),
    ]);
    assert.equal(taken.code, 2);
    assert.ok(existsSync(join(root, "exported", "model.safetensors")), "the other directory is untouched");
  });
});

// The real model, when `mage fetch-model` has put it in models/ (CI does; tests never download).
const SMOL = "models/smollm2-135m-instruct";
const SMOL_F32 = "models/gguf/SmolLM2-135M-Instruct.F32.gguf";
const HAVE_SMOL =
  existsSync(join(SMOL, "model.safetensors")) && existsSync(SMOL_F32)
    ? false
    : "run `mage fetch-model` first";

describe("SmolLM2-135M-Instruct imported from its Q4_1 GGUF", {
  skip: NO_WORKER || LLAMA || HAVE_SMOL,
}, () => {
  it("continues chat prompts greedily as llama.cpp does on the same weights (F32 GGUF)", async () => {
    const chats: ChatMessage[][] = [
      "What is the capital of France?",
      "Card: K. Opp: BET. Answer <action>CALL</action> or <action>FOLD</action>.",
      "Name a planet in the solar system.",
    ].map((c) => [{ role: "user", content: c }]);
    const { torch, llama } = await bothGreedy(SMOL, SMOL_F32, chats, 12);
    assert.deepEqual(torch, llama);
  });
});
