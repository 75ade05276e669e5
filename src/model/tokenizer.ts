/**
 * Byte-level BPE tokenizer of the embedded model.
 *
 * - Ids 0..255 are the raw bytes, ids 256..262 the chat/control special tokens, merges follow.
 * - Text is first split into chunks with the GPT-2 pattern (contractions, letter runs, digit
 *   runs, punctuation runs, whitespace), so merges never cross a chunk boundary. This is the
 *   same split as the Hugging Face `ByteLevel` pre-tokenizer (use_regex) and llama.cpp's
 *   "gpt-2" pre-tokenizer, so the saved `tokenizer.json`/GGUF vocabularies encode alike.
 * - Special tokens are never produced from plain text: `encode` only ever sees bytes.
 * - Saved as a Hugging Face `tokenizer.json` (BPE model, byte-level pre-tokenizer and decoder,
 *   tokens written in the GPT-2 byte↔unicode form, special tokens as `added_tokens`).
 */
import { readFile } from "node:fs/promises";
import { writeFileAtomic } from "../core/atomic-write.js";
import { UsageError } from "../core/errors.js";

export const SPECIAL_TOKENS = [
  "<|bos|>",
  "<|eos|>",
  "<|pad|>",
  "<|system|>",
  "<|user|>",
  "<|assistant|>",
  "<|end|>",
] as const;
export type SpecialToken = (typeof SPECIAL_TOKENS)[number];

/** Largest vocabulary the tokenizer trainer produces (the model presets use 1,024 rows). */
export const MAX_VOCAB_SIZE = 1024;
/** 256 bytes + the special tokens: the smallest possible vocabulary. */
export const MIN_VOCAB_SIZE = 256 + SPECIAL_TOKENS.length;

/** GPT-2 pre-tokenization pattern (identical to HF ByteLevel's and llama.cpp's "gpt-2"). */
export const PRETOKENIZE_PATTERN =
  /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** Splits text into the chunks that BPE merges never cross. Concatenating them gives `text` back. */
export function pretokenize(text: string): string[] {
  return text.match(PRETOKENIZE_PATTERN) ?? [];
}

// ---- GPT-2 byte <-> unicode mapping -------------------------------------------------------

function buildByteMaps(): { toChar: string[]; fromChar: Map<string, number> } {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const isPrintable = new Set(printable);
  const toChar: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    toChar[b] = String.fromCodePoint(isPrintable.has(b) ? b : 256 + extra++);
  }
  const fromChar = new Map<string, number>();
  for (let b = 0; b < 256; b++) fromChar.set(toChar[b], b);
  return { toChar, fromChar };
}

const BYTE_MAPS = buildByteMaps();

/** Byte-level unicode form of a byte string (GPT-2 `bytes_to_unicode`). */
export function bytesToUnicode(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += BYTE_MAPS.toChar[b];
  return s;
}

/** Inverse of `bytesToUnicode`; throws on characters outside the mapping. */
export function unicodeToBytes(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const b = BYTE_MAPS.fromChar.get(ch);
    if (b === undefined) throw new Error(`character ${JSON.stringify(ch)} is not in the byte-level alphabet`);
    out.push(b);
  }
  return Uint8Array.from(out);
}

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

// ---- the tokenizer --------------------------------------------------------------------------

export interface TokenizerData {
  /** Token strings by id: byte-level unicode form for ordinary tokens, literal text for specials. */
  vocab: readonly string[];
  /** Merges in rank order, as pairs of token strings (byte-level form). */
  merges: readonly (readonly [string, string])[];
  /** Ids of special tokens (the rest are ordinary byte-level tokens). */
  specialIds: readonly number[];
}

interface MergeEntry {
  rank: number;
  id: number;
}

const CACHE_LIMIT = 50_000;

function pairKey(a: number, b: number): number {
  return a * 0x100000 + b;
}

export class Tokenizer {
  readonly vocab: readonly string[];
  readonly merges: readonly (readonly [string, string])[];
  readonly specialIds: readonly number[];

  /** Byte b → token id. */
  private readonly byteIds: Int32Array;
  /** Bytes of each ordinary token (null for special tokens). */
  private readonly tokenBytes: (Uint8Array | null)[];
  private readonly mergeTable = new Map<number, MergeEntry>();
  private readonly idByString = new Map<string, number>();
  private readonly specialSet: Set<number>;
  private readonly cache = new Map<string, readonly number[]>();

  constructor(data: TokenizerData) {
    this.vocab = [...data.vocab];
    this.merges = data.merges.map(([a, b]) => [a, b] as const);
    this.specialIds = [...data.specialIds].sort((a, b) => a - b);
    this.specialSet = new Set(this.specialIds);
    for (const id of this.specialIds) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocab.length)
        throw new Error(`special token id ${id} outside the vocabulary (size ${this.vocab.length})`);
    }
    this.vocab.forEach((tok, id) => {
      if (this.idByString.has(tok))
        throw new Error(`token ${JSON.stringify(tok)} appears twice in the vocabulary`);
      this.idByString.set(tok, id);
    });
    this.tokenBytes = this.vocab.map((tok, id) => (this.specialSet.has(id) ? null : unicodeToBytes(tok)));
    this.byteIds = new Int32Array(256);
    for (let b = 0; b < 256; b++) {
      const id = this.idByString.get(BYTE_MAPS.toChar[b]);
      if (id === undefined || this.specialSet.has(id))
        throw new Error(`vocabulary lacks the byte token for byte ${b}`);
      this.byteIds[b] = id;
    }
    this.merges.forEach(([a, b], rank) => {
      const ia = this.idByString.get(a);
      const ib = this.idByString.get(b);
      const res = this.idByString.get(a + b);
      if (ia === undefined || ib === undefined || res === undefined)
        throw new Error(`merge #${rank} "${a} ${b}" refers to tokens missing from the vocabulary`);
      const key = pairKey(ia, ib);
      if (!this.mergeTable.has(key)) this.mergeTable.set(key, { rank, id: res });
    });
    for (const name of SPECIAL_TOKENS) {
      const id = this.idByString.get(name);
      if (id === undefined || !this.specialSet.has(id))
        throw new Error(`vocabulary lacks the special token ${name}`);
    }
  }

  get vocabSize(): number {
    return this.vocab.length;
  }

  /** Id of a special token such as `<|end|>`. */
  specialId(name: SpecialToken): number {
    return this.idByString.get(name)!;
  }

  get bosId(): number {
    return this.specialId("<|bos|>");
  }
  get eosId(): number {
    return this.specialId("<|eos|>");
  }
  get padId(): number {
    return this.specialId("<|pad|>");
  }
  /** The chat stop token. */
  get endId(): number {
    return this.specialId("<|end|>");
  }

  isSpecial(id: number): boolean {
    return this.specialSet.has(id);
  }

  /** Id of a token given in its vocabulary form, or undefined. */
  tokenToId(token: string): number | undefined {
    return this.idByString.get(token);
  }

  /** Plain text → token ids. Never yields a special token, even for text like "<|end|>". */
  encode(text: string): number[] {
    const out: number[] = [];
    for (const chunk of pretokenize(text)) {
      const ids = this.encodeChunk(chunk);
      for (let i = 0; i < ids.length; i++) out.push(ids[i]);
    }
    return out;
  }

  /** Encodes one pre-tokenized chunk (cached). */
  encodeChunk(chunk: string): readonly number[] {
    const hit = this.cache.get(chunk);
    if (hit) return hit;
    const bytes = utf8Encoder.encode(chunk);
    let ids: number[] = Array.from(bytes, (b) => this.byteIds[b]);
    while (ids.length > 1) {
      let bestRank = Number.POSITIVE_INFINITY;
      let best: MergeEntry | undefined;
      let bestLeft = -1;
      let bestRight = -1;
      for (let i = 0; i + 1 < ids.length; i++) {
        const m = this.mergeTable.get(pairKey(ids[i], ids[i + 1]));
        if (m && m.rank < bestRank) {
          bestRank = m.rank;
          best = m;
          bestLeft = ids[i];
          bestRight = ids[i + 1];
        }
      }
      if (!best) break;
      const next: number[] = [];
      for (let i = 0; i < ids.length; i++) {
        if (i + 1 < ids.length && ids[i] === bestLeft && ids[i + 1] === bestRight) {
          next.push(best.id);
          i++;
        } else next.push(ids[i]);
      }
      ids = next;
    }
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(chunk, ids);
    return ids;
  }

  /** The bytes the ids stand for; special tokens give their literal text unless skipped. */
  decodeBytes(ids: readonly number[], opts: { skipSpecial?: boolean } = {}): Uint8Array {
    const parts: Uint8Array[] = [];
    let total = 0;
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocab.length)
        throw new RangeError(`token id ${id} outside the vocabulary (size ${this.vocab.length})`);
      let bytes = this.tokenBytes[id];
      if (bytes === null) {
        if (opts.skipSpecial) continue;
        bytes = utf8Encoder.encode(this.vocab[id]);
      }
      parts.push(bytes);
      total += bytes.length;
    }
    const out = new Uint8Array(total);
    let off = 0;
    for (const p of parts) {
      out.set(p, off);
      off += p.length;
    }
    return out;
  }

  /** Ids → text (UTF-8; invalid byte sequences become U+FFFD). */
  decode(ids: readonly number[], opts: { skipSpecial?: boolean } = {}): string {
    return utf8Decoder.decode(this.decodeBytes(ids, opts));
  }

  /** The token's text for display (special tokens literally, bytes decoded leniently). */
  tokenText(id: number): string {
    return this.decode([id]);
  }

  toData(): TokenizerData {
    return {
      vocab: [...this.vocab],
      merges: this.merges.map(([a, b]) => [a, b]),
      specialIds: [...this.specialIds],
    };
  }

  /** The Hugging Face `tokenizer.json` object. */
  toHuggingFaceJson(): HfTokenizerJson {
    const vocab: Record<string, number> = {};
    this.vocab.forEach((tok, id) => {
      vocab[tok] = id;
    });
    return {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: this.specialIds.map((id) => ({
        id,
        content: this.vocab[id],
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: true,
      })),
      normalizer: null,
      pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: {
        type: "BPE",
        dropout: null,
        unk_token: null,
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: false,
        byte_fallback: false,
        vocab,
        merges: this.merges.map(([a, b]) => `${a} ${b}`),
      },
    };
  }

  /** Serialised `tokenizer.json` text (stable: the same tokenizer always gives the same bytes). */
  toJsonString(): string {
    return `${JSON.stringify(this.toHuggingFaceJson(), null, 2)}\n`;
  }

  static fromHuggingFaceJson(json: unknown): Tokenizer {
    const j = json as Partial<HfTokenizerJson>;
    const model = j?.model as HfTokenizerJson["model"] | undefined;
    if (model?.type !== "BPE" || typeof model.vocab !== "object" || !Array.isArray(model.merges))
      throw new Error("tokenizer.json: expected a BPE model with vocab and merges");
    const preType = (j.pre_tokenizer as { type?: string } | null | undefined)?.type;
    if (preType !== "ByteLevel")
      throw new Error(`tokenizer.json: expected a ByteLevel pre-tokenizer, got ${preType}`);
    const entries = Object.entries(model.vocab);
    const size = entries.length;
    const vocab: string[] = new Array(size);
    for (const [tok, id] of entries) {
      if (!Number.isInteger(id) || id < 0 || id >= size || vocab[id] !== undefined)
        throw new Error(
          `tokenizer.json: vocabulary ids must be 0..${size - 1} without gaps (token ${tok} → ${id})`,
        );
      vocab[id] = tok;
    }
    const specialIds: number[] = [];
    for (const t of j.added_tokens ?? []) {
      if (vocab[t.id] !== t.content)
        throw new Error(
          `tokenizer.json: added token ${t.content} (id ${t.id}) does not match the vocabulary`,
        );
      if (t.special) specialIds.push(t.id);
    }
    const merges = model.merges.map((m: string | [string, string], i: number): [string, string] => {
      if (Array.isArray(m) && m.length === 2) return [m[0], m[1]];
      if (typeof m === "string") {
        const parts = m.split(" ");
        if (parts.length === 2) return [parts[0], parts[1]];
      }
      throw new Error(`tokenizer.json: merge #${i} is malformed: ${JSON.stringify(m)}`);
    });
    return new Tokenizer({ vocab, merges, specialIds });
  }

  static fromJsonString(text: string): Tokenizer {
    return Tokenizer.fromHuggingFaceJson(JSON.parse(text));
  }

  async save(path: string): Promise<void> {
    await writeFileAtomic(path, this.toJsonString());
  }

  static async load(path: string): Promise<Tokenizer> {
    return Tokenizer.fromJsonString(await readFile(path, "utf8"));
  }
}

export interface HfAddedToken {
  id: number;
  content: string;
  single_word: boolean;
  lstrip: boolean;
  rstrip: boolean;
  normalized: boolean;
  special: boolean;
}

export interface HfTokenizerJson {
  version: string;
  truncation: null;
  padding: null;
  added_tokens: HfAddedToken[];
  normalizer: null;
  pre_tokenizer: Record<string, unknown>;
  post_processor: Record<string, unknown> | null;
  decoder: Record<string, unknown>;
  model: {
    type: "BPE";
    dropout: null;
    unk_token: null;
    continuing_subword_prefix: null;
    end_of_word_suffix: null;
    fuse_unk: boolean;
    byte_fallback: boolean;
    vocab: Record<string, number>;
    merges: (string | [string, string])[];
  };
}

// ---- training -------------------------------------------------------------------------------

export interface TrainTokenizerOptions {
  /** Total vocabulary size to aim for (bytes + specials + merges), 263..1024. Default 1024. */
  vocabSize?: number;
  /** Stop merging when the most frequent pair occurs fewer times than this. Default 2. */
  minFrequency?: number;
}

/** A tokenizer with only the byte and special tokens (no merges). */
export function byteTokenizer(): Tokenizer {
  return trainTokenizer([], { vocabSize: MIN_VOCAB_SIZE });
}

/**
 * BPE training's state: the corpus's distinct pretokenized chunks as token ids with their counts,
 * how often each adjacent pair occurs (over chunk occurrences) and which chunks hold it.
 */
class PairCounts {
  private readonly words: number[][] = [];
  private readonly counts: number[] = [];
  private readonly pairCounts = new Map<number, number>();
  private readonly pairWords = new Map<number, Set<number>>();

  constructor(texts: Iterable<string>) {
    const chunkCounts = new Map<string, number>();
    for (const text of texts) {
      for (const chunk of pretokenize(text)) chunkCounts.set(chunk, (chunkCounts.get(chunk) ?? 0) + 1);
    }
    for (const [chunk, n] of chunkCounts) {
      const bytes = utf8Encoder.encode(chunk);
      if (bytes.length < 2) continue;
      this.words.push(Array.from(bytes));
      this.counts.push(n);
    }
    for (let w = 0; w < this.words.length; w++) this.addPairs(w, 1);
  }

  /** The most frequent pair not banned; ties go to the smaller (left, right) ids. */
  mostFrequent(
    banned: ReadonlySet<number>,
  ): { key: number; left: number; right: number; count: number } | null {
    let bestKey = -1;
    let bestCount = 0;
    for (const [key, c] of this.pairCounts) {
      if (banned.has(key)) continue;
      if (c > bestCount || (c === bestCount && key < bestKey)) {
        bestCount = c;
        bestKey = key;
      }
    }
    if (bestKey < 0) return null;
    return {
      key: bestKey,
      left: Math.floor(bestKey / 0x100000),
      right: bestKey % 0x100000,
      count: bestCount,
    };
  }

  /** Replaces every occurrence of the pair `key` by `newId` and updates the counts. */
  merge(key: number, newId: number): void {
    const left = Math.floor(key / 0x100000);
    const right = key % 0x100000;
    const affected = [...(this.pairWords.get(key) ?? [])].sort((a, b) => a - b);
    this.pairWords.delete(key);
    for (const w of affected) {
      const ids = this.words[w];
      if (!holdsPair(ids, left, right)) continue;
      this.addPairs(w, -1);
      const next: number[] = [];
      for (let i = 0; i < ids.length; i++) {
        if (i + 1 < ids.length && ids[i] === left && ids[i + 1] === right) {
          next.push(newId);
          i++;
        } else next.push(ids[i]);
      }
      this.words[w] = next;
      this.addPairs(w, 1);
    }
    this.pairCounts.delete(key);
  }

  private addPairs(w: number, sign: number): void {
    const ids = this.words[w];
    const n = this.counts[w] * sign;
    for (let i = 0; i + 1 < ids.length; i++) {
      const key = pairKey(ids[i], ids[i + 1]);
      const c = (this.pairCounts.get(key) ?? 0) + n;
      if (c === 0) this.pairCounts.delete(key);
      else this.pairCounts.set(key, c);
      if (sign > 0) {
        let set = this.pairWords.get(key);
        if (!set) this.pairWords.set(key, (set = new Set()));
        set.add(w);
      }
    }
  }
}

function holdsPair(ids: readonly number[], left: number, right: number): boolean {
  for (let i = 0; i + 1 < ids.length; i++) if (ids[i] === left && ids[i + 1] === right) return true;
  return false;
}

/**
 * Trains byte-level BPE on `texts`. Deterministic: the most frequent adjacent pair (counted
 * over chunk occurrences) is merged first; ties go to the pair with the smaller (left, right) ids.
 */
export function trainTokenizer(texts: Iterable<string>, opts: TrainTokenizerOptions = {}): Tokenizer {
  const target = opts.vocabSize ?? MAX_VOCAB_SIZE;
  if (!Number.isInteger(target) || target < MIN_VOCAB_SIZE || target > MAX_VOCAB_SIZE)
    throw new UsageError(
      `tokenizer vocabSize must be an integer in ${MIN_VOCAB_SIZE}..${MAX_VOCAB_SIZE}, got ${target}`,
    );
  const minFrequency = opts.minFrequency ?? 2;
  if (!Number.isInteger(minFrequency) || minFrequency < 1)
    throw new UsageError(`tokenizer minFrequency must be a positive integer, got ${minFrequency}`);

  const vocab: string[] = [];
  for (let b = 0; b < 256; b++) vocab.push(BYTE_MAPS.toChar[b]);
  const specialIds: number[] = [];
  for (const s of SPECIAL_TOKENS) {
    specialIds.push(vocab.length);
    vocab.push(s);
  }
  const idByString = new Map<string, number>();
  vocab.forEach((t, i) => {
    idByString.set(t, i);
  });
  const merges: [string, string][] = [];
  const pairs = new PairCounts(texts);
  const banned = new Set<number>();
  while (vocab.length < target) {
    const best = pairs.mostFrequent(banned);
    if (best === null || best.count < minFrequency) break;
    const { key, left, right } = best;
    const str = vocab[left] + vocab[right];
    let newId = idByString.get(str);
    if (newId !== undefined && specialIds.includes(newId)) {
      // Cannot happen with the GPT-2 split (specials mix letters and punctuation), but a
      // merge must never spell a special token.
      banned.add(key);
      continue;
    }
    if (newId === undefined) {
      newId = vocab.length;
      vocab.push(str);
      idByString.set(str, newId);
    }
    merges.push([vocab[left], vocab[right]]);
    pairs.merge(key, newId);
  }
  return new Tokenizer({ vocab, merges, specialIds });
}
