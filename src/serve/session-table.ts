/**
 * `mage env-serve`'s live sessions: at most `maxSessions` at once, each dropped once idle for
 * `ttlMs`. The map is kept in order of last use (a touched session moves to the end), so the
 * expired ones are always at the front: a sweep, and the wait until a place frees, cost nothing
 * per session still live.
 */
export interface Touched {
  touched: number;
}

export class SessionTable<T extends Touched> {
  private readonly map = new Map<string, T>();
  /** Places promised to creates still being built (they count against the cap). */
  private reserved = 0;

  constructor(
    readonly maxSessions: number,
    readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!Number.isInteger(maxSessions) || maxSessions < 1)
      throw new RangeError(`maxSessions must be a positive integer, got ${maxSessions}`);
    if (!(ttlMs > 0)) throw new RangeError(`the session TTL must be > 0 ms, got ${ttlMs}`);
  }

  get size(): number {
    return this.map.size;
  }

  /** The session, marked as used now; undefined when unknown or expired. */
  use(id: string): T | undefined {
    const s = this.map.get(id);
    if (!s) return undefined;
    if (this.now() - s.touched > this.ttlMs) {
      this.map.delete(id);
      return undefined;
    }
    s.touched = this.now();
    this.map.delete(id);
    this.map.set(id, s);
    return s;
  }

  /**
   * Promises a place to a create about to be built, or returns false when every place is taken
   * (after dropping the expired sessions). The caller then `add`s the session or `release`s it.
   */
  reserve(): boolean {
    this.sweep();
    if (this.map.size + this.reserved >= this.maxSessions) return false;
    this.reserved++;
    return true;
  }

  release(): void {
    this.reserved = Math.max(0, this.reserved - 1);
  }

  /** Adds a session built after a successful `reserve`. */
  add(id: string, s: T): void {
    this.release();
    s.touched = this.now();
    this.map.set(id, s);
  }

  delete(id: string): boolean {
    return this.map.delete(id);
  }

  /** Drops the sessions idle longer than the TTL; returns how many went. */
  sweep(): number {
    const limit = this.now() - this.ttlMs;
    let dropped = 0;
    for (const [id, s] of this.map) {
      if (s.touched >= limit) break;
      this.map.delete(id);
      dropped++;
    }
    return dropped;
  }

  /** Whole seconds until the least recently used session expires (at least 1): a full table's Retry-After. */
  retryAfterSeconds(): number {
    const first = this.map.values().next();
    if (first.done) return 1;
    const left = first.value.touched + this.ttlMs - this.now();
    return Math.max(1, Math.ceil(left / 1000));
  }

  clear(): void {
    this.map.clear();
    this.reserved = 0;
  }
}
