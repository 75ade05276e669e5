import { spawnSync } from "node:child_process";
import { Rng } from "../core/rng.js";
import { availableKernels } from "../model/kernels/select.js";
import type { Kernels } from "../model/kernels/types.js";

/**
 * GEMM throughput per kernel (GFLOP/s, best of several timed calls after a warm-up, since the
 * machine may be shared), side by side with the ratio to the pure-TS "js" kernel.
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

function gflops(kernels: Kernels, s: Shape, rng: Rng, budgetMs: number): number {
  const a = Float32Array.from({ length: s.m * s.k }, () => rng.float() - 0.5);
  const b = Float32Array.from({ length: s.k * s.n }, () => rng.float() - 0.5);
  const c = new Float32Array(s.m * s.n);
  const lda = s.transA ? s.m : s.k;
  const ldb = s.transB ? s.k : s.n;
  const call = (): number => {
    const t0 = performance.now();
    kernels.gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, 0, lda, b, 0, ldb, 0, c, 0, s.n);
    return performance.now() - t0;
  };
  const first = call();
  const reps = Math.max(2, Math.min(30, Math.floor(budgetMs / Math.max(first, 1e-3))));
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < reps; r++) best = Math.min(best, call());
  return (2 * s.m * s.n * s.k) / (best * 1e6);
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
  console.log(`kernels: ${names.join(", ")} (GFLOP/s, best of timed calls; ×js = ratio to the js kernel)`);
  if (!names.includes("native")) console.log("native kernel unavailable: `npm run build:native` to build it");
  const rng = Rng.seeded("bench-gemm");
  const header = ["shape".padEnd(26), ...names.map((n) => n.padStart(16))].join("");
  console.log(header);
  for (const s of shapes()) {
    const cells: string[] = [];
    let base = 0;
    for (const k of kernels) {
      // The js kernel is slow; give it a smaller time budget per shape.
      const g = gflops(k, s, rng.derive(s.label), k.name === "js" ? 150 : 400);
      if (k.name === "js") base = g;
      cells.push(
        (k.name === "js" ? g.toFixed(2) : `${g.toFixed(1)} (×${(g / base).toFixed(0)})`).padStart(16),
      );
    }
    console.log([s.label.padEnd(26), ...cells].join(""));
  }
  const torch = torchGflops512();
  if (torch !== undefined)
    console.log(`torch (1 thread, /usr/bin/python3) 512³ NN: ${torch.toFixed(1)} GFLOP/s`);
  else console.log("torch: not importable by /usr/bin/python3 (skipped)");
}
