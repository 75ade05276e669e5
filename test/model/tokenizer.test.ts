import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import {
  assistantOwners,
  CHAT_TEMPLATE_JINJA,
  renderChat,
  renderChatText,
  stopTokenId,
} from "../../src/model/chat-template.js";
import {
  bytesToUnicode,
  byteTokenizer,
  MAX_VOCAB_SIZE,
  pretokenize,
  SPECIAL_TOKENS,
  Tokenizer,
  trainTokenizer,
  unicodeToBytes,
} from "../../src/model/tokenizer.js";
import type { ChatMessage } from "../../src/policy/types.js";

// ---- synthetic game transcripts --------------------------------------------------------------

function ticTacToe(rng: Rng): string {
  const cells = Array.from({ length: 9 }, () => rng.pick([".", "X", "O"]));
  const rows = [0, 1, 2].map((r) => cells.slice(3 * r, 3 * r + 3).join(" ")).join("\n");
  return `You are playing Tic-Tac-Toe as X.\nBoard:\n${rows}\nLegal moves: ${[1, 2, 3, 5, 8]
    .filter(() => rng.bernoulli(0.6))
    .join(", ")}\nYour move: <answer>${rng.intBetween(1, 9)}</answer>`;
}

function sokoban(rng: Rng): string {
  const h = rng.intBetween(5, 8);
  const w = rng.intBetween(5, 9);
  const lines: string[] = [];
  for (let y = 0; y < h; y++) {
    let line = "";
    for (let x = 0; x < w; x++) {
      const edge = y === 0 || x === 0 || y === h - 1 || x === w - 1;
      line += edge ? "#" : rng.pick([" ", " ", " ", "$", ".", "#", "@", "*"]);
    }
    lines.push(line);
  }
  const moves = Array.from({ length: rng.intBetween(1, 6) }, () => rng.pick(["up", "down", "left", "right"]));
  return `Sokoban level ${rng.int(1000)}:\n${lines.join("\n")}\nPush every box ($) onto a goal (.).\nActions: ${moves.join(" ")}\nReward: ${(rng.float() * 2 - 1).toFixed(3)}`;
}

function kuhn(rng: Rng): string {
  const card = rng.pick(["J", "Q", "K"]);
  return `Kuhn poker, round ${rng.int(50)}. Your card: ${card}. Opponent ${rng.pick(["checks", "bets"])}.\nThink: with ${card} I should ${rng.pick(["call", "fold", "bet", "check"])}.\n<answer>${rng.pick(["call", "fold", "bet", "check"])}</answer>`;
}

function mines(rng: Rng): string {
  const rows: string[] = [];
  for (let y = 0; y < 5; y++)
    rows.push(Array.from({ length: 6 }, () => rng.pick(["?", "?", "0", "1", "2", "F"])).join(""));
  return `MineSweeper 5x6 with 4 mines.\n${rows.join("\n")}\nReveal (row, col): (${rng.int(5)}, ${rng.int(6)})\nAttempt ${rng.intBetween(1, 3)} failed; reflect and try again.`;
}

function transcripts(seed: string, n: number): string[] {
  const rng = Rng.seeded(seed);
  const makers = [ticTacToe, sokoban, kuhn, mines];
  return Array.from({ length: n }, (_, i) => makers[i % makers.length](rng.derive("t", i)));
}

function randomUnicode(rng: Rng, len: number): string {
  const ranges: [number, number][] = [
    [0x20, 0x7e],
    [0x00, 0x1f],
    [0xa0, 0x24f],
    [0x300, 0x36f], // combining marks
    [0x391, 0x3c9],
    [0x400, 0x4ff],
    [0x4e00, 0x4fff],
    [0x2000, 0x206f], // unicode spaces and punctuation
    [0xe000, 0xe0ff], // private use
    [0x1f300, 0x1f6ff], // emoji
    [0x10000, 0x1007f],
    [0x30, 0x39],
  ];
  let s = "";
  for (let i = 0; i < len; i++) {
    const [lo, hi] = rng.pick(ranges);
    const cp = rng.intBetween(lo, hi);
    s += String.fromCodePoint(cp);
    if (rng.bernoulli(0.15)) s += rng.pick([" ", "  ", "\n", "\t", " \n "]);
  }
  return s;
}

/** Independent reference: GPT-2 style BPE on byte-level strings using the saved merge list. */
function referenceEncode(tok: Tokenizer, text: string): number[] {
  const json = tok.toHuggingFaceJson();
  const ranks = new Map<string, number>();
  (json.model.merges as string[]).forEach((m, i) => {
    ranks.set(m, i);
  });
  const out: number[] = [];
  for (const chunk of pretokenize(text)) {
    let word = [...bytesToUnicode(new TextEncoder().encode(chunk))];
    for (;;) {
      let best = -1;
      let bestRank = Number.POSITIVE_INFINITY;
      for (let i = 0; i + 1 < word.length; i++) {
        const r = ranks.get(`${word[i]} ${word[i + 1]}`);
        if (r !== undefined && r < bestRank) {
          bestRank = r;
          best = i;
        }
      }
      if (best < 0) break;
      const a = word[best];
      const b = word[best + 1];
      const next: string[] = [];
      for (let i = 0; i < word.length; i++) {
        if (i + 1 < word.length && word[i] === a && word[i + 1] === b) {
          next.push(a + b);
          i++;
        } else next.push(word[i]);
      }
      word = next;
    }
    for (const piece of word) out.push(json.model.vocab[piece]);
  }
  return out;
}

const corpus = transcripts("train", 1500);
let tok: Tokenizer;
let dir: string;

before(async () => {
  tok = trainTokenizer(corpus, { vocabSize: MAX_VOCAB_SIZE });
  dir = await mkdtemp(join(tmpdir(), "mage-tok-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("byte-level BPE tokenizer", () => {
  it("has 256 byte tokens, one token per special, and at most 1,024 tokens", () => {
    assert.ok(tok.vocabSize <= MAX_VOCAB_SIZE);
    assert.ok(tok.vocabSize > 600, `expected many merges from the corpus, got ${tok.vocabSize} tokens`);
    for (let b = 0; b < 256; b++) assert.deepEqual([...tok.decodeBytes([b])], [b]);
    const ids = SPECIAL_TOKENS.map((s) => tok.specialId(s));
    assert.equal(new Set(ids).size, SPECIAL_TOKENS.length);
    for (const [i, s] of SPECIAL_TOKENS.entries()) {
      assert.ok(tok.isSpecial(ids[i]));
      assert.equal(tok.decode([ids[i]]), s);
      assert.equal(tok.decode([ids[i]], { skipSpecial: true }), "");
    }
    assert.equal(tok.specialIds.length, SPECIAL_TOKENS.length);
  });

  it("trains deterministically, independent of corpus order", () => {
    const again = trainTokenizer(corpus, { vocabSize: MAX_VOCAB_SIZE });
    assert.equal(again.toJsonString(), tok.toJsonString());
    const shuffled = Rng.seeded("shuffle").shuffle([...corpus]);
    assert.equal(trainTokenizer(shuffled, { vocabSize: MAX_VOCAB_SIZE }).toJsonString(), tok.toJsonString());
    const other = trainTokenizer(transcripts("other", 1500), { vocabSize: MAX_VOCAB_SIZE });
    assert.notEqual(other.toJsonString(), tok.toJsonString());
  });

  it("stops at the requested vocabulary size and rejects sizes out of range", () => {
    const small = trainTokenizer(corpus, { vocabSize: 300 });
    assert.equal(small.vocabSize, 300);
    // A smaller vocabulary is a prefix of the larger one: same merge order.
    assert.deepEqual(small.merges, tok.merges.slice(0, small.merges.length));
    assert.throws(() => trainTokenizer(corpus, { vocabSize: 1025 }), /vocabSize/);
    assert.throws(() => trainTokenizer(corpus, { vocabSize: 100 }), /vocabSize/);
    assert.equal(byteTokenizer().vocabSize, 256 + SPECIAL_TOKENS.length);
  });

  it("round-trips game transcripts and compresses them", () => {
    const held = transcripts("held-out", 300);
    let bytes = 0;
    let tokens = 0;
    for (const t of held) {
      const ids = tok.encode(t);
      assert.equal(tok.decode(ids), t);
      bytes += Buffer.byteLength(t);
      tokens += ids.length;
    }
    assert.ok(tokens < bytes * 0.5, `expected < 0.5 tokens per byte, got ${(tokens / bytes).toFixed(3)}`);
  });

  it("round-trips random unicode text exactly", () => {
    const rng = Rng.seeded("unicode");
    for (let i = 0; i < 300; i++) {
      const s = randomUnicode(rng.derive(i), rng.intBetween(0, 80));
      const ids = tok.encode(s);
      assert.equal(tok.decode(ids), s);
      for (const id of ids) assert.ok(!tok.isSpecial(id));
    }
  });

  it("matches an independent GPT-2 style BPE over the saved merges", () => {
    const rng = Rng.seeded("reference");
    const texts = [
      ...transcripts("ref", 60),
      ...Array.from({ length: 60 }, (_, i) => randomUnicode(rng.derive(i), 40)),
    ];
    for (const t of texts) assert.deepEqual(tok.encode(t), referenceEncode(tok, t));
  });

  it("never produces special tokens from plain text", () => {
    const text = `${SPECIAL_TOKENS.join(" ")}<|end|><|assistant|>hello<|user|>`;
    const ids = tok.encode(text);
    for (const id of ids) assert.ok(!tok.isSpecial(id), `special token ${id} produced from text`);
    assert.equal(tok.decode(ids), text);
    // even a tokenizer trained on text full of special-token spellings
    const t2 = trainTokenizer(
      Array.from({ length: 200 }, () => "<|end|><|user|> hi <|assistant|>"),
      {
        vocabSize: 400,
      },
    );
    for (const id of t2.encode("<|end|><|user|> hi <|assistant|>")) assert.ok(!t2.isSpecial(id));
  });

  it("pre-tokenizes into chunks that concatenate back to the text and merges stay inside chunks", () => {
    const rng = Rng.seeded("chunks");
    for (let i = 0; i < 100; i++) {
      const s = randomUnicode(rng.derive(i), 50);
      assert.equal(pretokenize(s).join(""), s);
    }
    assert.deepEqual(pretokenize("I'll move 12 up!!  ok"), [
      "I",
      "'ll",
      " move",
      " 12",
      " up",
      "!!",
      " ",
      " ok",
    ]);
    // every token's bytes lie within a single chunk: encoding chunk by chunk gives the same ids
    for (const t of transcripts("chunk-check", 20)) {
      const perChunk = pretokenize(t).flatMap((c) => [...tok.encodeChunk(c)]);
      assert.deepEqual(tok.encode(t), perChunk);
    }
  });

  it("replaces invalid UTF-8 on decode and keeps exact bytes in decodeBytes", () => {
    const euro = [...new TextEncoder().encode("€")]; // 3 bytes
    const partial = euro.slice(0, 2);
    assert.equal(tok.decode(partial), "\uFFFD");
    assert.deepEqual([...tok.decodeBytes(partial)], partial);
    assert.equal(tok.decode([0xff, 0x41]), "\uFFFDA");
    assert.throws(() => tok.decode([tok.vocabSize]), /outside the vocabulary/);
  });

  it("maps bytes to GPT-2 unicode form and back", () => {
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    const s = bytesToUnicode(all);
    assert.equal([...s].length, 256);
    assert.deepEqual([...unicodeToBytes(s)], [...all]);
    assert.equal(bytesToUnicode(new TextEncoder().encode(" ")), "Ġ");
    assert.equal(bytesToUnicode(new TextEncoder().encode("\n")), "Ċ");
    assert.equal(bytesToUnicode(new TextEncoder().encode("A")), "A");
  });

  it("saves and loads a Hugging Face tokenizer.json exactly", async () => {
    const path = join(dir, "tokenizer.json");
    await tok.save(path);
    const text = await readFile(path, "utf8");
    const json = JSON.parse(text);
    assert.equal(json.model.type, "BPE");
    assert.equal(json.pre_tokenizer.type, "ByteLevel");
    assert.equal(json.decoder.type, "ByteLevel");
    assert.equal(Object.keys(json.model.vocab).length, tok.vocabSize);
    assert.equal(json.model.merges.length, tok.merges.length);
    for (const m of json.model.merges) assert.match(m, /^\S+ \S+$/);
    assert.equal(json.added_tokens.length, SPECIAL_TOKENS.length);
    for (const a of json.added_tokens) {
      assert.equal(a.special, true);
      assert.equal(json.model.vocab[a.content], a.id);
    }
    // a merged token with a leading space is written in byte-level form
    assert.ok(Object.keys(json.model.vocab).some((k) => k.startsWith("Ġ") && k.length > 1));

    const loaded = await Tokenizer.load(path);
    assert.equal(loaded.toJsonString(), text);
    assert.deepEqual(loaded.vocab, tok.vocab);
    assert.deepEqual(loaded.merges, tok.merges);
    assert.deepEqual(loaded.specialIds, tok.specialIds);
    for (const t of transcripts("reload", 50)) assert.deepEqual(loaded.encode(t), tok.encode(t));
    // array-form merges (newer tokenizers) load too
    json.model.merges = json.model.merges.map((m: string) => m.split(" "));
    assert.deepEqual(Tokenizer.fromHuggingFaceJson(json).merges, tok.merges);
  });

  it("rejects a tokenizer.json that lacks byte tokens or special tokens", () => {
    const json = tok.toHuggingFaceJson();
    const noSpecial = structuredClone(json);
    noSpecial.added_tokens = noSpecial.added_tokens.filter((a) => a.content !== "<|end|>");
    assert.throws(() => Tokenizer.fromHuggingFaceJson(noSpecial), /<\|end\|>/);
    const badMerge = structuredClone(json);
    (badMerge.model.merges as string[]).push("zzzq qqqz");
    assert.throws(() => Tokenizer.fromHuggingFaceJson(badMerge), /merge/);
  });
});

// ---- chat template ---------------------------------------------------------------------------

function randomConversation(rng: Rng, n: number): ChatMessage[] {
  const msgs: ChatMessage[] = [
    { role: "system", content: "You play games. Answer inside <answer></answer>." },
  ];
  const texts = transcripts(`conv-${rng.nextU32()}`, n);
  for (let i = 0; i < n; i++) {
    const role = i % 2 === 0 ? "user" : "assistant";
    const m: ChatMessage = { role, content: texts[i] };
    if (role === "assistant" && rng.bernoulli(0.5)) {
      // sampled ids that need not equal encode(content)
      const ids = Array.from({ length: rng.intBetween(0, 12) }, () => rng.int(tok.vocabSize));
      if (rng.bernoulli(0.5)) ids.push(tok.endId);
      m.tokenIds = ids;
    }
    msgs.push(m);
  }
  return msgs;
}

function isPrefix(a: readonly number[], b: readonly number[]): boolean {
  return a.length <= b.length && a.every((x, i) => b[i] === x);
}

describe("chat template", () => {
  it("renders <|bos|> then <|role|> content <|end|> per message and ends prompts with <|assistant|>", () => {
    const msgs: ChatMessage[] = [
      { role: "system", content: "S" },
      { role: "user", content: "hello there" },
    ];
    const r = renderChat(tok, msgs, { addGenerationPrompt: true });
    const expected = [
      tok.bosId,
      tok.specialId("<|system|>"),
      ...tok.encode("S"),
      tok.endId,
      tok.specialId("<|user|>"),
      ...tok.encode("hello there"),
      tok.endId,
      tok.specialId("<|assistant|>"),
    ];
    assert.deepEqual(r.ids, expected);
    assert.equal(stopTokenId(tok), tok.specialId("<|end|>"));
    assert.equal(tok.decode(r.ids), renderChatText(msgs, { addGenerationPrompt: true }));
    assert.deepEqual(renderChat(tok, msgs, { bos: false }).ids, expected.slice(1, -1));
  });

  it("is append-only: each prefix of the conversation renders to a prefix of the ids", () => {
    const rng = Rng.seeded("append");
    for (let c = 0; c < 30; c++) {
      const msgs = randomConversation(rng.derive(c), rng.intBetween(1, 8));
      let prev: number[] = [];
      for (let k = 0; k <= msgs.length; k++) {
        const ids = renderChat(tok, msgs.slice(0, k)).ids;
        assert.ok(isPrefix(prev, ids), `conversation ${c}: prefix ${k - 1} is not a prefix of ${k}`);
        prev = ids;
        if (k < msgs.length && msgs[k].role === "assistant") {
          const prompt = renderChat(tok, msgs.slice(0, k), { addGenerationPrompt: true }).ids;
          assert.ok(isPrefix(prompt, renderChat(tok, msgs.slice(0, k + 1)).ids));
        }
      }
    }
  });

  it("uses assistant tokenIds verbatim and reports assistant spans and owners", () => {
    const rng = Rng.seeded("spans");
    for (let c = 0; c < 30; c++) {
      const msgs = randomConversation(rng.derive(c), rng.intBetween(2, 8));
      const r = renderChat(tok, msgs);
      const owner = assistantOwners(r);
      const assistantIdx = msgs.map((m, i) => (m.role === "assistant" ? i : -1)).filter((i) => i >= 0);
      assert.deepEqual(
        r.assistantSpans.map((s) => s.messageIndex),
        assistantIdx,
      );
      let owned = 0;
      for (const s of r.assistantSpans) {
        const m = msgs[s.messageIndex];
        assert.equal(r.ids[s.start - 1], tok.specialId("<|assistant|>"));
        assert.equal(r.ids[s.contentEnd], tok.endId);
        assert.equal(s.end, s.contentEnd + 1);
        if (m.tokenIds) {
          assert.ok(s.fromTokenIds);
          // verbatim: the span is exactly the sampled ids (+ <|end|> when they lacked it)
          const span = r.ids.slice(s.start, s.end);
          const endSampled = m.tokenIds.length > 0 && m.tokenIds[m.tokenIds.length - 1] === tok.endId;
          assert.equal(s.endSampled, endSampled);
          assert.deepEqual(span, endSampled ? [...m.tokenIds] : [...m.tokenIds, tok.endId]);
        } else {
          assert.deepEqual(r.ids.slice(s.start, s.contentEnd), tok.encode(m.content));
        }
        for (let p = s.start; p < s.end; p++) assert.equal(owner[p], s.messageIndex);
        owned += s.end - s.start;
      }
      assert.equal(owner.filter((o) => o >= 0).length, owned);
    }
  });

  it("matches the text form when special tokens are split out before encoding (HF/llama.cpp style)", () => {
    const msgs = randomConversation(Rng.seeded("text"), 6).map(({ role, content }) => ({ role, content }));
    const text = renderChatText(msgs, { addGenerationPrompt: true });
    const parts = text.split(/(<\|[a-z]+\|>)/).filter((p) => p.length > 0);
    const ids = parts.flatMap((p) =>
      SPECIAL_TOKENS.includes(p as never) ? [tok.tokenToId(p)!] : tok.encode(p),
    );
    assert.deepEqual(ids, renderChat(tok, msgs, { addGenerationPrompt: true }).ids);
    assert.match(CHAT_TEMPLATE_JINJA, /add_generation_prompt/);
    assert.match(CHAT_TEMPLATE_JINJA, /<\|end\|>/);
  });

  it("rejects tokenIds outside the vocabulary", () => {
    assert.throws(
      () => renderChat(tok, [{ role: "assistant", content: "", tokenIds: [tok.vocabSize] }]),
      /outside the vocabulary/,
    );
  });
});
