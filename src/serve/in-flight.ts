/**
 * Requests in flight, for a server's shutdown: `idle(ms)` resolves once none is left, or after
 * `ms`, whichever comes first (the grace a shutdown gives the requests it lets finish).
 */
export class InFlight {
  private n = 0;
  private readonly waiters: (() => void)[] = [];

  get count(): number {
    return this.n;
  }

  enter(): void {
    this.n++;
  }

  leave(): void {
    if (--this.n === 0) for (const w of this.waiters.splice(0)) w();
  }

  idle(ms: number): Promise<void> {
    if (this.n === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
