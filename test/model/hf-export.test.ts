import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { command as exportCommand } from "../../src/cli/commands/export-hf.js";
import { Rng } from "../../src/core/rng.js";
import { CHAT_TEMPLATE_JINJA, renderChatIds } from "../../src/model/chat-template.js";
import { saveCheckpoint } from "../../src/model/checkpoint.js";
import { presetConfig } from "../../src/model/config.js";
import { exportHf, HF_FILES, hfTensorName, importHf, permuteRopeRows } from "../../src/model/hf-export.js";
import { initParams, type ModelParams } from "../../src/model/params.js";
import { paramsFromMap, paramsToMap } from "../../src/model/params-io.js";
import { readSafetensors } from "../../src/model/safetensors.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";
import { forwardLogits } from "../../src/model/transformer.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { runCommand } from "../cli/run-command.js";
import { magePython, runPythonJson } from "./hf-python.js";

let dir: string;
let tok: Tokenizer;
let params: ModelParams;
// vocabSize above the tokenizer's size, as in the presets (embedding rows the tokenizer never uses).
const config = presetConfig("tiny", { vocabSize: 512, contextLength: 64 });

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "mage-hf-export-"));
  tok = trainTokenizer(
    Array.from(
      { length: 300 },
      (_, i) => `Player ${i % 7} plays <answer>${i % 9}</answer>. The board:\n X | O | ${i}\n`,
    ),
    { vocabSize: 420 },
  );
  // Larger than the init std so that attention patterns, and RoPE, matter for the logits.
  params = initParams(config, Rng.seeded("hf-export"), { std: 0.2 });
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

const SEQUENCES = [
  [256, 10, 20, 300, 40, 50, 60, 70, 80, 90, 100, 5, 6, 7, 8, 9, 260, 11],
  [256, 259, 400, 401, 402, 3, 3, 3, 511, 1, 2],
];

const CONVERSATIONS: { messages: ChatMessage[]; addGenerationPrompt: boolean }[] = [
  {
    messages: [
      { role: "system", content: "You play TicTacToe as X." },
      { role: "user", content: "The board:\n X | O | 3\n 4 | X | 6\nYour move?" },
    ],
    addGenerationPrompt: true,
  },
  {
    messages: [
      { role: "user", content: "Player 3   plays\t<answer>4</answer>.  " },
      { role: "assistant", content: " I think… café ☕ 日本語 🎲 -- 12345678 it's" },
      { role: "user", content: "" },
    ],
    addGenerationPrompt: false,
  },
  {
    messages: [
      { role: "system", content: "\n\n  leading spaces and 'quotes' \"double\" \r\n" },
      { role: "user", content: "Ünïcödé\u00a0nbsp and    many     spaces" },
      { role: "assistant", content: "<answer>7</answer>" },
      { role: "user", content: "again?" },
    ],
    addGenerationPrompt: true,
  },
];

const PY_CHECK = `
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
req = json.load(sys.stdin)
model = AutoModelForCausalLM.from_pretrained(req["dir"], local_files_only=True)
model.eval()
tok = AutoTokenizer.from_pretrained(req["dir"], local_files_only=True)
logits = []
with torch.no_grad():
    for seq in req["sequences"]:
        logits.append(model(torch.tensor([seq])).logits[0].flatten().tolist())
chats = []
for c in req["conversations"]:
    r = tok.apply_chat_template(c["messages"], add_generation_prompt=c["addGenerationPrompt"], tokenize=True)
    chats.append(list(r["input_ids"]) if hasattr(r, "keys") else list(r))
texts = [tok(t, add_special_tokens=False)["input_ids"] for t in req["texts"]]
print(json.dumps({
    "architecture": type(model).__name__,
    "dtype": str(model.dtype),
    "tied": model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
    "logits": logits, "chats": chats, "texts": texts,
    "template": tok.chat_template,
    "special": [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id],
}))
`;

interface PyResult {
  architecture: string;
  dtype: string;
  tied: boolean;
  logits: number[][];
  chats: number[][];
  texts: number[][];
  template: string;
  special: number[];
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

describe("Hugging Face export", () => {
  it("maps every tensor to its transformers name and permutes only Q and K, reversibly", async () => {
    assert.equal(hfTensorName("token_embd.weight"), "model.embed_tokens.weight");
    assert.equal(hfTensorName("blk.1.ffn_gate.weight"), "model.layers.1.mlp.gate_proj.weight");
    assert.equal(hfTensorName("blk.0.attn_k.weight"), "model.layers.0.self_attn.k_proj.weight");
    assert.throws(() => hfTensorName("blk.0.nope"), RangeError);
    // headDim 4: HF rows of a head are embedded rows 0, 2, 1, 3.
    const w = Float32Array.from({ length: 2 * 4 * 3 }, (_, i) => i);
    const p = permuteRopeRows(w, 2, 4, 3, true);
    assert.deepEqual(Array.from(p.subarray(0, 12)), [0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11]);
    assert.deepEqual(permuteRopeRows(p, 2, 4, 3, false), w);

    const out = join(dir, "roundtrip");
    await exportHf(out, { config, params: paramsToMap(params), tokenizer: tok });
    const names = (await readdir(out)).sort();
    assert.deepEqual(names, Object.values(HF_FILES).sort(), "no temporary files left behind");
    const st = await readSafetensors(join(out, HF_FILES.model));
    assert.ok(!st.tensors.has("lm_head.weight"), "tied head is not written");
    assert.equal(st.tensors.size, 2 + 9 * config.nLayers);
    const q = st.tensors.get("model.layers.0.self_attn.q_proj.weight")!;
    assert.notDeepEqual(q.data, params.tensors[2], "Q rows are permuted");
    assert.deepEqual(st.tensors.get("model.layers.0.self_attn.v_proj.weight")!.data, params.tensors[4]);
    const cfg = JSON.parse(await readFile(join(out, HF_FILES.config), "utf8"));
    assert.deepEqual(cfg.architectures, ["LlamaForCausalLM"]);
    assert.equal(cfg.hidden_size, config.dModel);
    assert.equal(cfg.intermediate_size, config.dFf);
    assert.equal(cfg.num_key_value_heads, config.nHeads);
    assert.equal(cfg.rms_norm_eps, config.normEps);
    assert.equal(cfg.rope_parameters.rope_theta, config.ropeBase);
    assert.equal(cfg.max_position_embeddings, config.contextLength);
    assert.equal(cfg.vocab_size, config.vocabSize);
    assert.equal(cfg.tie_word_embeddings, true);
    assert.equal(cfg.bos_token_id, tok.bosId);
    assert.equal(cfg.pad_token_id, null, "no padding_idx: the <|pad|> row trains like any other");
    const tc = JSON.parse(await readFile(join(out, HF_FILES.tokenizerConfig), "utf8"));
    assert.equal(tc.chat_template, CHAT_TEMPLATE_JINJA);
    assert.equal(tc.eos_token, "<|end|>");
    const gen = JSON.parse(await readFile(join(out, HF_FILES.generation), "utf8"));
    assert.deepEqual(gen.eos_token_id, [tok.endId, tok.eosId]);

    const back = await importHf(out);
    assert.deepEqual(back.config, config);
    assert.deepEqual(back.tokenizer.toData(), tok.toData());
    for (const [name, t] of paramsToMap(params)) assert.deepEqual(back.params.get(name), t, name);
  });

  it("refuses to replace a directory that is not an earlier export, and replaces an earlier export", async () => {
    const other = join(dir, "precious");
    await mkdir(other);
    await writeFile(join(other, "notes.txt"), "keep me");
    await assert.rejects(
      exportHf(other, { config, params: paramsToMap(params), tokenizer: tok }),
      /not an earlier export/,
    );
    assert.equal(await readFile(join(other, "notes.txt"), "utf8"), "keep me");
    const out = join(dir, "twice");
    await exportHf(out, { config, params: paramsToMap(params), tokenizer: tok });
    const p2 = initParams(config, Rng.seeded("other"), { std: 0.2 });
    await exportHf(out, { config, params: paramsToMap(p2), tokenizer: tok });
    assert.deepEqual((await importHf(out)).params.get("blk.1.attn_q.weight"), p2.tensors[1 + 9 + 1]);
    assert.deepEqual(
      (await readdir(dir)).filter((n) => n.startsWith(".")),
      [],
      "no hidden temporaries",
    );
  });

  it("mage export-hf takes a training run's folder, names its checkpoint, and checks its flags", async () => {
    const run = join(dir, "run");
    await saveCheckpoint(join(run, "checkpoints", "iter-000003"), {
      config,
      params: paramsToMap(params),
      tokenizer: tok,
    });
    const out = join(dir, "cli-out");
    const r = await runCommand(exportCommand, ["--checkpoint", run, "--out", out]);
    assert.equal(r.code, 0);
    assert.match(r.err, /iter-000003/);
    assert.match(r.out, /LlamaForCausalLM, 2 layers, hidden 128/);
    assert.deepEqual((await importHf(out)).params.get("token_embd.weight"), params.tensors[0]);
    await assert.rejects(runCommand(exportCommand, ["--checkpoint", run]), /--out DIR is required/);
    await assert.rejects(
      runCommand(exportCommand, ["--checkpoint", join(dir, "missing"), "--out", out]),
      /not a complete checkpoint directory/,
    );
  });

  it("transformers loads the export and gives the embedded model's logits; its tokenizer renders chats token-exactly", {
    skip: magePython() ? false : "needs MAGE_PYTHON (npm test sets it)",
  }, async (t) => {
    const out = join(dir, "hf");
    await exportHf(out, { config, params: paramsToMap(params), tokenizer: tok });
    const texts = CONVERSATIONS.flatMap((c) => c.messages.map((m) => m.content));
    const py = runPythonJson<PyResult>(PY_CHECK, {
      dir: out,
      sequences: SEQUENCES,
      conversations: CONVERSATIONS,
      texts,
    });
    assert.equal(py.architecture, "LlamaForCausalLM");
    assert.equal(py.dtype, "torch.float32");
    assert.ok(py.tied, "lm_head is tied to the embedding");
    assert.equal(py.template, CHAT_TEMPLATE_JINJA);
    // eos is the end-of-turn token, as in HF chat models (the worker closes assistant turns with it).
    assert.deepEqual(py.special, [tok.bosId, tok.endId, tok.padId]);

    let worst = 0;
    SEQUENCES.forEach((seq, i) => {
      worst = Math.max(worst, maxAbsDiff(py.logits[i], forwardLogits(params, seq)));
    });
    assert.ok(worst < 1e-4, `logits differ by ${worst}`);

    // The same weights without the Q/K permutation give other logits: the test sees RoPE.
    const unpermuted = new Map(paramsToMap(params));
    for (const name of ["blk.0.attn_q.weight", "blk.0.attn_k.weight"])
      unpermuted.set(name, permuteRopeRows(unpermuted.get(name)!, config.nHeads, 32, config.dModel, true));
    const wrong = maxAbsDiff(py.logits[0], forwardLogits(paramsFromMap(config, unpermuted), SEQUENCES[0]));
    assert.ok(wrong > 100 * worst && wrong > 1e-3, `the permutation matters (${wrong} vs ${worst})`);
    t.diagnostic(
      `logits max |Δ| ${worst.toExponential(2)}; without the Q/K permutation ${wrong.toExponential(2)}`,
    );

    CONVERSATIONS.forEach((c, i) => {
      const ids = renderChatIds(tok, c.messages, { addGenerationPrompt: c.addGenerationPrompt });
      assert.deepEqual(py.chats[i], ids, `conversation ${i}`);
    });
    texts.forEach((t, i) => {
      assert.deepEqual(py.texts[i], tok.encode(t), `text ${JSON.stringify(t)}`);
    });
  });
});
