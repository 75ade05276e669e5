/**
 * The one random generator of the project: xoshiro128** streams, split by key.
 *
 * `derive(...keys)` makes a child generator from this generator's *key* (not from its
 * stream position), so a child keyed by what it is for ("task", 17, "opponent") is the
 * same whatever order other draws happen in. That is what keeps concurrent rollouts
 * deterministic. `Math.random` is never used in the project.
 */

export type RngKeyPart = string | number;

export interface RngState {
  /** Two 32-bit halves of the 64-bit key this stream was derived from. */
  key: [number, number];
  /** xoshiro128** state words. */
  s: [number, number, number, number];
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Absorbs one key part into a 64-bit key held as two 32-bit words. */
function absorb(key: [number, number], part: RngKeyPart): [number, number] {
  let a = key[0];
  let b = key[1];
  const text = typeof part === "number" ? `#${Number.isInteger(part) ? part : part.toString()}` : `$${part}`;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x9e3779b1) >>> 0;
    b = Math.imul(b ^ c, 0x85ebca77) >>> 0;
    a = ((a << 13) | (a >>> 19)) >>> 0;
    b = ((b << 17) | (b >>> 15)) >>> 0;
  }
  // Mix both halves into each other so parts of different lengths separate well.
  const na = fmix32(a ^ Math.imul(b, 0x27d4eb2f) ^ text.length);
  const nb = fmix32(b ^ Math.imul(na, 0x165667b1) ^ 0x5bd1e995);
  return [na, nb];
}

function splitmix32(x: number): [number, number] {
  x = (x + 0x9e3779b9) >>> 0;
  let z = x;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  z = (z ^ (z >>> 16)) >>> 0;
  return [x, z];
}

export class Rng {
  private readonly key: [number, number];
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  private constructor(key: [number, number], state?: [number, number, number, number]) {
    this.key = key;
    if (state) {
      [this.s0, this.s1, this.s2, this.s3] = state;
    } else {
      let x = key[0] ^ Math.imul(key[1], 0x2545f491);
      const words: number[] = [];
      for (let i = 0; i < 4; i++) {
        const [nx, z] = splitmix32(x ^ (i === 2 ? key[1] : 0));
        x = nx;
        words.push(z);
      }
      if ((words[0] | words[1] | words[2] | words[3]) === 0) words[0] = 1;
      [this.s0, this.s1, this.s2, this.s3] = words as [number, number, number, number];
    }
  }

  /** A root generator for a run, from its configured seed. */
  static seeded(seed: RngKeyPart): Rng {
    return new Rng(absorb([0x6d616765, 0x2d726e67], seed));
  }

  static fromState(state: RngState): Rng {
    return new Rng(
      [state.key[0] >>> 0, state.key[1] >>> 0],
      [state.s[0] >>> 0, state.s[1] >>> 0, state.s[2] >>> 0, state.s[3] >>> 0],
    );
  }

  /** A child stream keyed by what it is for; independent of this stream's position. */
  derive(...parts: RngKeyPart[]): Rng {
    let key = this.key;
    for (const p of parts) key = absorb(key, p);
    return new Rng(key);
  }

  /** A fresh copy of this stream from its start (same key, position zero). */
  restarted(): Rng {
    return new Rng(this.key);
  }

  getState(): RngState {
    return { key: [this.key[0], this.key[1]], s: [this.s0, this.s1, this.s2, this.s3] };
  }

  clone(): Rng {
    return Rng.fromState(this.getState());
  }

  /** Uniform 32-bit unsigned integer. */
  nextU32(): number {
    const s0 = this.s0;
    const s1 = this.s1;
    const s2 = this.s2;
    const s3 = this.s3;
    const m = Math.imul(s1, 5);
    const result = Math.imul((m << 7) | (m >>> 25), 9) >>> 0;
    const t = (s1 << 9) >>> 0;
    let n2 = s2 ^ s0;
    let n3 = s3 ^ s1;
    const n1 = s1 ^ n2;
    const n0 = s0 ^ n3;
    n2 ^= t;
    n3 = (n3 << 11) | (n3 >>> 21);
    this.s0 = n0 >>> 0;
    this.s1 = n1 >>> 0;
    this.s2 = n2 >>> 0;
    this.s3 = n3 >>> 0;
    return result;
  }

  /** Uniform float in [0, 1) with 53 bits of precision. */
  float(): number {
    const hi = this.nextU32() >>> 5; // 27 bits
    const lo = this.nextU32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** Uniform integer in [0, n). Unbiased (rejection sampling). */
  int(n: number): number {
    if (!Number.isInteger(n) || n <= 0)
      throw new RangeError(`Rng.int: n must be a positive integer, got ${n}`);
    if (n === 1) return 0;
    if (n <= 0x100000000) {
      const limit = 0x100000000 - (0x100000000 % n);
      for (;;) {
        const x = this.nextU32();
        if (x < limit) return x % n;
      }
    }
    return Math.floor(this.float() * n);
  }

  /** Uniform integer in [lo, hi] inclusive. */
  intBetween(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  bernoulli(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError("Rng.pick: empty list");
    return items[this.int(items.length)];
  }

  /** Index drawn with probability proportional to `weights` (non-negative, not all zero). */
  weighted(weights: readonly number[]): number {
    let total = 0;
    for (const w of weights) {
      if (!(w >= 0)) throw new RangeError(`Rng.weighted: weights must be non-negative, got ${w}`);
      total += w;
    }
    if (total <= 0) throw new RangeError("Rng.weighted: weights sum to zero");
    let u = this.float() * total;
    for (let i = 0; i < weights.length; i++) {
      u -= weights[i];
      if (u < 0) return i;
    }
    for (let i = weights.length - 1; i >= 0; i--) if (weights[i] > 0) return i;
    return weights.length - 1;
  }

  /** Fisher–Yates shuffle in place; returns the same array. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const tmp = items[i];
      items[i] = items[j];
      items[j] = tmp;
    }
    return items;
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    let u = 0;
    while (u === 0) u = this.float();
    const v = this.float();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /** A 31-bit integer seed for APIs that take a plain number. */
  seed31(): number {
    return this.nextU32() >>> 1;
  }
}
