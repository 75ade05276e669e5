import { spawnSync } from "node:child_process";
import { cpus, loadavg } from "node:os";
import { Rng } from "../core/rng.js";
import { availableKernels } from "../model/kernels/select.js";
import type { Kernels } from "../model/kernels/types.js";

/**
 * GEMM throughput per kernel (GFLOP/s, best of several timed wall-clock calls after a warm-up, since
 * the machine may be shared; the load average is printed so a busy machine shows), side by side with
 * the ratio to the pure-TS "js" kernel.
 *
 * Shapes: 512³ in all four transpose combinations, and the model's shapes at 2,048 tokens
 * (M = tokens, K = d_in, N = d_out): forward Y = X·W (NN), input gradient dX = dY·Wᵀ (NT) and
 * weight gradient dW = Xᵀ·dY (TN). If Debian's PyTorch is importable by /usr/bin/python3, its
 * 1-thread 512³ figure is printed for comparison (it is detected, never installed).
 */

interface Shape {
  label: string;
  transA: boolean;
  transB: boolean;
  m: number;
  n: number;
  k: number;
}

function shapes(): Shape[] {
  const out: Shape[] = [];
  for (const [ta, tb] of [
    [false, false],
    [false, true],
    [true, false],
    [true, true],
  ] as const) {
    out.push({
      label: `512³ ${ta ? "T" : "N"}${tb ? "T" : "N"}`,
      transA: ta,
      transB: tb,
      m: 512,
      n: 512,
      k: 512,
    });
  }
  const T = 2048;
  for (const [dIn, dOut] of [
    [128, 128],
    [128, 512],
    [512, 128],
    [512, 1024],
  ]) {
    out.push({
      label: `fwd  X·W   ${T}×${dOut}×${dIn}`,
      transA: false,
      transB: false,
      m: T,
      n: dOut,
      k: dIn,
    });
    out.push({ label: `bwd  dY·Wᵀ ${T}×${dIn}×${dOut}`, transA: false, transB: true, m: T, n: dIn, k: dOut });
    out.push({ label: `bwd  Xᵀ·dY ${dIn}×${dOut}×${T}`, transA: true, transB: false, m: dIn, n: dOut, k: T });
  }
  return out;
}

function gflops(
  kernels: Kernels,
  s: Shape,
  rng: Rng,
  budgetMs: number,
  minReps: number,
): { wall: number; cpu: number } {
  const a = Float32Array.from({ length: s.m * s.k }, () => rng.float() - 0.5);
  const b = Float32Array.from({ length: s.k * s.n }, () => rng.float() - 0.5);
  const c = new Float32Array(s.m * s.n);
  const lda = s.transA ? s.m : s.k;
  const ldb = s.transB ? s.k : s.n;
  let bestWall = Number.POSITIVE_INFINITY;
  let bestCpu = Number.POSITIVE_INFINITY;
  const call = (): number => {
    const w0 = performance.now();
    const c0 = process.cpuUsage();
    kernels.gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, 0, lda, b, 0, ldb, 0, c, 0, s.n);
    const used = process.cpuUsage(c0);
    const wall = performance.now() - w0;
    bestWall = Math.min(bestWall, wall);
    bestCpu = Math.min(bestCpu, (used.user + used.system) / 1000);
    return wall;
  };
  const first = call();
  const reps = Math.max(minReps, Math.min(30, Math.floor(budgetMs / Math.max(first, 1e-3))));
  for (let r = 0; r < reps; r++) call();
  const flop = 2 * s.m * s.n * s.k;
  // CPU time of a call shorter than the clock's resolution can read 0: use wall time then.
  return { wall: flop / (bestWall * 1e6), cpu: flop / ((bestCpu > 0 ? bestCpu : bestWall) * 1e6) };
}

function torchGflops512(): number | undefined {
  const script = [
    "import time, torch",
    "torch.set_num_threads(1)",
    "a = torch.randn(512, 512); b = torch.randn(512, 512)",
    "for _ in range(5): a @ b",
    "best = 1e9",
    "for _ in range(20):",
    "    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)",
    "print(2 * 512**3 / best / 1e9)",
  ].join("\n");
  const r = spawnSync("/usr/bin/python3", ["-c", script], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) return undefined;
  const v = Number(r.stdout.trim().split("\n").pop());
  return Number.isFinite(v) ? v : undefined;
}

export async function run(): Promise<void> {
  const kernels = await availableKernels();
  const names = kernels.map((k) => k.name);
  if (!names.includes("native")) console.log("native kernel unavailable: `npm run build:native` to build it");
  const rng = Rng.seeded("bench-gemm");
  // Warm up: V8 first runs wasm through its baseline compiler and tiers up after a while.
  for (const k of kernels) {
    for (let r = 0; r < (k.name === "js" ? 1 : 10); r++) {
      gflops(k, { label: "warm-up", transA: false, transB: false, m: 192, n: 192, k: 192 }, rng, 0, 0);
    }
  }
  const load = (): string =>
    loadavg()
      .map((v) => v.toFixed(1))
      .join(" ");
  console.log(`load average before: ${load()} (${cpus().length} CPUs)`);
  console.log(
    "GFLOP/s per CPU-second (best call; process CPU time, which a shared machine inflates less than\n" +
      "wall time) with the ratio to js; in brackets the same from wall-clock time.",
  );
  console.log(["shape".padEnd(26), ...names.map((n) => n.padStart(n === "js" ? 14 : 24))].join(""));
  for (const s of shapes()) {
    const cells: string[] = [];
    let base = 0;
    for (const k of kernels) {
      // The js kernel is slow (seconds per call on the big shapes): best of two calls.
      const g =
        k.name === "js" ? gflops(k, s, rng.derive(s.label), 0, 1) : gflops(k, s, rng.derive(s.label), 600, 3);
      if (k.name === "js") {
        base = g.cpu;
        cells.push(`${g.cpu.toFixed(2)} [${g.wall.toFixed(2)}]`.padStart(14));
      } else {
        cells.push(`${g.cpu.toFixed(1)} (×${(g.cpu / base).toFixed(0)}) [${g.wall.toFixed(1)}]`.padStart(24));
      }
    }
    console.log([s.label.padEnd(26), ...cells].join(""));
  }
  console.log(`load average after: ${load()}`);
  const torch = torchGflops512();
  if (torch !== undefined)
    console.log(`torch (1 thread, /usr/bin/python3) 512³ NN: ${torch.toFixed(1)} GFLOP/s`);
  else console.log("torch: not importable by /usr/bin/python3 (skipped)");
}
