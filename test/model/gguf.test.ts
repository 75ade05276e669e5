import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { CHAT_TEMPLATE_JINJA } from "../../src/model/chat-template.js";
import { type ModelConfig, paramSpecs, presetConfig } from "../../src/model/config.js";
import {
  dequantizeQ8_0,
  exportGguf,
  f16BitsToF32,
  f32ToF16Bits,
  GGUF_ALIGNMENT,
  GgmlType,
  GgufValueType,
  ggufTensorToFloat32,
  isGgufFile,
  parseGguf,
  quantizeQ8_0,
  readGguf,
  TOKEN_TYPE,
} from "../../src/model/gguf.js";
import { type Tokenizer, trainTokenizer } from "../../src/model/tokenizer.js";

function randomParams(config: ModelConfig, seed: string): Map<string, Float32Array> {
  const rng = Rng.seeded(seed);
  const params = new Map<string, Float32Array>();
  for (const spec of paramSpecs(config)) {
    const n = spec.shape.reduce((a, b) => a * b, 1);
    const r = rng.derive(spec.name);
    const scale = spec.shape.length === 1 ? 0.1 : 0.05;
    params.set(
      spec.name,
      Float32Array.from({ length: n }, () => (spec.shape.length === 1 ? 1 : 0) + r.normal() * scale),
    );
  }
  return params;
}

let dir: string;
let tok: Tokenizer;
const config = presetConfig("tiny", { vocabSize: 512 });

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "mage-gguf-"));
  tok = trainTokenizer(
    Array.from(
      { length: 300 },
      (_, i) => `Sokoban ${i}: push the box $ to . then answer <answer>${i % 4}</answer>`,
    ),
    { vocabSize: 420 },
  );
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("GGUF export", () => {
  it("writes llama metadata, a GPT-2 BPE vocabulary and exact F32 tensors", async () => {
    const params = randomParams(config, "f32");
    const path = join(dir, "model-f32.gguf");
    await exportGguf(path, { config, params, tokenizer: tok, type: "F32" });
    assert.ok(await isGgufFile(path));
    const buf = await readFile(path);
    assert.equal(buf.toString("latin1", 0, 4), "GGUF");
    assert.equal(buf.readUInt32LE(4), 3);
    const g = parseGguf(buf);
    const md = g.metadata;
    assert.equal(md.get("general.architecture"), "llama");
    assert.equal(md.get("general.alignment"), GGUF_ALIGNMENT);
    assert.equal(md.get("general.file_type"), 0);
    const expectU32: Record<string, number> = {
      "llama.context_length": config.contextLength,
      "llama.embedding_length": config.dModel,
      "llama.block_count": config.nLayers,
      "llama.feed_forward_length": config.dFf,
      "llama.attention.head_count": config.nHeads,
      "llama.attention.head_count_kv": config.nHeads,
      "llama.rope.dimension_count": config.dModel / config.nHeads,
      "llama.vocab_size": config.vocabSize,
    };
    for (const [k, v] of Object.entries(expectU32)) {
      assert.equal(md.get(k), v, k);
      assert.equal(g.metadataTypes.get(k), GgufValueType.UINT32, k);
    }
    assert.equal(md.get("llama.rope.freq_base"), config.ropeBase);
    assert.equal(g.metadataTypes.get("llama.rope.freq_base"), GgufValueType.FLOAT32);
    assert.equal(md.get("llama.attention.layer_norm_rms_epsilon"), Math.fround(config.normEps));

    // tokenizer
    assert.equal(md.get("tokenizer.ggml.model"), "gpt2");
    assert.equal(md.get("tokenizer.ggml.pre"), "gpt-2");
    const tokens = md.get("tokenizer.ggml.tokens") as string[];
    const types = md.get("tokenizer.ggml.token_type") as number[];
    assert.deepEqual(g.metadataTypes.get("tokenizer.ggml.token_type"), [
      GgufValueType.ARRAY,
      GgufValueType.INT32,
    ]);
    assert.equal(tokens.length, config.vocabSize, "one token per embedding row");
    assert.equal(new Set(tokens).size, tokens.length, "tokens are unique");
    assert.deepEqual(tokens.slice(0, tok.vocabSize), [...tok.vocab]);
    assert.equal(tokens[32], "Ġ", "byte tokens in GPT-2 unicode form");
    for (let id = 0; id < config.vocabSize; id++) {
      const expected =
        id >= tok.vocabSize ? TOKEN_TYPE.UNUSED : tok.isSpecial(id) ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.NORMAL;
      assert.equal(types[id], expected, `token type of ${id}`);
    }
    assert.deepEqual(
      md.get("tokenizer.ggml.merges"),
      tok.merges.map(([a, b]) => `${a} ${b}`),
    );
    assert.equal(md.get("tokenizer.ggml.bos_token_id"), tok.specialId("<|bos|>"));
    assert.equal(md.get("tokenizer.ggml.eos_token_id"), tok.specialId("<|eos|>"));
    assert.equal(md.get("tokenizer.ggml.eot_token_id"), tok.specialId("<|end|>"));
    assert.equal(md.get("tokenizer.ggml.padding_token_id"), tok.specialId("<|pad|>"));
    assert.equal(md.get("tokenizer.chat_template"), CHAT_TEMPLATE_JINJA);

    // tensors
    const specs = paramSpecs(config);
    assert.deepEqual(
      g.tensors.map((t) => t.name),
      specs.map((s) => s.name),
    );
    assert.ok(!g.tensors.some((t) => t.name === "output.weight"), "head is tied to token_embd");
    assert.equal(g.dataOffset % GGUF_ALIGNMENT, 0);
    for (const [i, t] of g.tensors.entries()) {
      assert.deepEqual(t.dims, [...specs[i].shape].reverse(), `${t.name} dims are innermost-first`);
      assert.equal(t.type, GgmlType.F32);
      assert.equal(t.offset % GGUF_ALIGNMENT, 0);
      assert.deepEqual(ggufTensorToFloat32(t), params.get(t.name), `${t.name} round-trips exactly`);
    }
    assert.deepEqual(g.tensors[0].dims, [config.dModel, config.vocabSize]);
    const last = g.tensors[g.tensors.length - 1];
    assert.equal(
      (await stat(path)).size,
      g.dataOffset + Math.ceil((last.offset + last.data.byteLength) / 32) * 32,
    );
  });

  it("quantises matrices to Q8_0 within the quantisation error and keeps norms F32", async () => {
    const params = randomParams(config, "q8");
    const path = join(dir, "model-q8.gguf");
    await exportGguf(path, { config, params, tokenizer: tok, type: "Q8_0" });
    const g = await readGguf(path);
    assert.equal(g.metadata.get("general.file_type"), 7);
    for (const t of g.tensors) {
      const orig = params.get(t.name)!;
      const back = ggufTensorToFloat32(t);
      if (t.dims.length === 1) {
        assert.equal(t.type, GgmlType.F32, `${t.name} stays F32`);
        assert.deepEqual(back, orig);
        continue;
      }
      assert.equal(t.type, GgmlType.Q8_0, t.name);
      assert.equal(t.data.byteLength, (orig.length / 32) * 34);
      let maxErr = 0;
      for (let b = 0; b < orig.length / 32; b++) {
        let amax = 0;
        for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(orig[b * 32 + j]));
        const d = amax / 127;
        const tol = d * (0.5 + 127 / 2048) + 1e-9;
        for (let j = 0; j < 32; j++) {
          const err = Math.abs(back[b * 32 + j] - orig[b * 32 + j]);
          assert.ok(err <= tol, `${t.name}[${b * 32 + j}]: error ${err} > ${tol}`);
          maxErr = Math.max(maxErr, err);
        }
      }
      assert.ok(maxErr > 0, `${t.name} was actually quantised`);
    }
    assert.ok((await stat(path)).size < (await stat(join(dir, "model-f32.gguf"))).size * 0.4);
  });

  it("keeps matrices whose rows are not a multiple of 32 in F32", async () => {
    const odd: ModelConfig = { ...config, dModel: 64, nHeads: 2, dFf: 80, nLayers: 1 };
    const params = randomParams(odd, "odd");
    const path = join(dir, "odd.gguf");
    await exportGguf(path, { config: odd, params, tokenizer: tok, type: "Q8_0" });
    const g = await readGguf(path);
    const byName = new Map(g.tensors.map((t) => [t.name, t]));
    assert.equal(byName.get("blk.0.ffn_down.weight")!.type, GgmlType.F32);
    assert.deepEqual(
      ggufTensorToFloat32(byName.get("blk.0.ffn_down.weight")!),
      params.get("blk.0.ffn_down.weight"),
    );
    assert.equal(byName.get("blk.0.ffn_up.weight")!.type, GgmlType.Q8_0);
    assert.equal(g.metadata.get("llama.feed_forward_length"), 80);
  });

  it("rejects unknown types, missing tensors and a tokenizer larger than the model", async () => {
    const params = randomParams(config, "bad");
    await assert.rejects(
      exportGguf(join(dir, "x.gguf"), { config, params, tokenizer: tok, type: "F16" as never }),
      (e: unknown) => e instanceof UsageError && /F32, Q8_0/.test(e.message),
    );
    const missing = new Map(params);
    missing.delete("token_embd.weight");
    await assert.rejects(
      exportGguf(join(dir, "x.gguf"), { config, params: missing, tokenizer: tok, type: "F32" }),
      /token_embd/,
    );
    const tiny = { ...config, vocabSize: 300 };
    await assert.rejects(
      exportGguf(join(dir, "x.gguf"), {
        config: tiny,
        params: randomParams(tiny, "t"),
        tokenizer: tok,
        type: "F32",
      }),
      /tokenizer has/,
    );
  });
});

describe("Q8_0 and F16", () => {
  it("quantises like ggml: d = max|x|/127, q = roundf(x/d), halves away from zero", () => {
    const x = new Float32Array(64);
    x[0] = 127;
    x[1] = -63.5;
    x[2] = 0.5;
    x[3] = -0.5;
    x[4] = 1.49;
    // second block is all zeros
    const q = quantizeQ8_0(x);
    assert.equal(q.length, 68);
    const v = new DataView(q.buffer);
    assert.equal(v.getUint16(0, true), 0x3c00, "scale 1.0 in F16");
    assert.deepEqual(
      [v.getInt8(2), v.getInt8(3), v.getInt8(4), v.getInt8(5), v.getInt8(6)],
      [127, -64, 1, -1, 1],
    );
    assert.equal(v.getUint16(34, true), 0);
    assert.deepEqual([...dequantizeQ8_0(q, 64).subarray(32)], new Array(32).fill(0));
    assert.throws(() => quantizeQ8_0(new Float32Array(33)), /multiple of 32/);
  });

  it("converts every F16 value exactly and rounds float32 to nearest even", () => {
    for (let h = 0; h < 0x10000; h++) {
      const f = f16BitsToF32(h);
      if (Number.isNaN(f)) {
        assert.ok(Number.isNaN(f16BitsToF32(f32ToF16Bits(f))));
        continue;
      }
      assert.equal(f32ToF16Bits(f), h, `half 0x${h.toString(16)}`);
    }
    assert.equal(f32ToF16Bits(1), 0x3c00);
    assert.equal(f32ToF16Bits(-2), 0xc000);
    assert.equal(f32ToF16Bits(0.1), 0x2e66);
    assert.equal(f32ToF16Bits(65504), 0x7bff);
    assert.equal(f32ToF16Bits(65520), 0x7c00, "rounds up to infinity");
    assert.equal(f32ToF16Bits(1 + 2 ** -11), 0x3c00, "tie to even (down)");
    assert.equal(f32ToF16Bits(1 + 3 * 2 ** -11), 0x3c02, "tie to even (up)");
    assert.equal(f32ToF16Bits(2 ** -25), 0, "smallest tie rounds to zero");
    assert.equal(f32ToF16Bits(2 ** -24), 1);
  });
});

describe("GGUF reader", () => {
  it("parses a file built by hand from the format description", () => {
    const parts: Buffer[] = [];
    const u32 = (v: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(v);
      parts.push(b);
    };
    const u64 = (v: number) => {
      const b = Buffer.alloc(8);
      b.writeBigUInt64LE(BigInt(v));
      parts.push(b);
    };
    const str = (s: string) => {
      u64(Buffer.byteLength(s));
      parts.push(Buffer.from(s));
    };
    parts.push(Buffer.from("GGUF", "latin1"));
    u32(3);
    u64(1); // tensors
    u64(2); // kv
    str("general.architecture");
    u32(8);
    str("llama");
    str("xs");
    u32(9);
    u32(4);
    u64(2);
    u32(7);
    u32(9);
    str("t");
    u32(2);
    u64(2);
    u64(1);
    u32(0);
    u64(0);
    const head = Buffer.concat(parts);
    const pad = Buffer.alloc(Math.ceil(head.length / 32) * 32 - head.length);
    const data = Buffer.alloc(8);
    data.writeFloatLE(1.25, 0);
    data.writeFloatLE(-3, 4);
    const g = parseGguf(Buffer.concat([head, pad, data]));
    assert.equal(g.metadata.get("general.architecture"), "llama");
    assert.deepEqual(g.metadata.get("xs"), [7, 9]);
    assert.equal(g.tensors[0].name, "t");
    assert.deepEqual(g.tensors[0].dims, [2, 1]);
    assert.deepEqual([...ggufTensorToFloat32(g.tensors[0])], [1.25, -3]);
    assert.throws(() => parseGguf(Buffer.concat([head, pad])), /past the end/);
    assert.throws(() => parseGguf(Buffer.from("GGUX")), /magic/);
  });
});
