import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { UsageError } from "../../core/errors.js";
import { checkGemmArgs, scaleC } from "./gemm-args.js";
import type { FusedOps, Kernels } from "./types.js";

/**
 * The "native" kernel: OpenBLAS cblas_sgemm through the small N-API addon in native/
 * (built by `npm run build:native`, optional). Zero-copy: the addon works on the Float32Arrays' memory.
 *
 * The addon also carries the learner's row-wise hot paths (native/mage_ops.c), exposed as `ops`;
 * an addon built before they existed still loads, without them.
 *
 * OpenBLAS runs with 1 thread unless MAGE_BLAS_THREADS (or, failing that, OPENBLAS_NUM_THREADS) says
 * otherwise: the target machine has 2 cores and a learner may run beside a second process.
 */

/** The addon's exports: sgemm and thread control (mage_blas.c) plus the fused ops (mage_ops.c). */
interface Addon extends Partial<FusedOps> {
  sgemm(
    transA: boolean,
    transB: boolean,
    m: number,
    n: number,
    k: number,
    alpha: number,
    a: Float32Array,
    aOff: number,
    lda: number,
    b: Float32Array,
    bOff: number,
    ldb: number,
    beta: number,
    c: Float32Array,
    cOff: number,
    ldc: number,
  ): void;
  setThreads(n: number): void;
  getThreads(): number;
}

export interface NativeKernels extends Kernels {
  /** OpenBLAS worker threads in use. */
  threads(): number;
  /** Changes the OpenBLAS worker thread count (a positive integer). */
  setThreads(n: number): void;
  /** Path of the loaded addon. */
  readonly path: string;
}

export type NativeStatus = { available: true; kernels: NativeKernels } | { available: false; reason: string };

/** How to get the native kernel, for error messages. */
export const NATIVE_HELP =
  "build it with `npm run build:native` (needs a C compiler and OpenBLAS; Debian/Ubuntu: " +
  "`apt-get install -y build-essential libopenblas-dev`), or set MAGE_NATIVE_ADDON to a built mage_blas.node";

/** Where the addon is looked for: MAGE_NATIVE_ADDON, else native/build/Release/mage_blas.node in the package. */
export function nativeAddonPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.MAGE_NATIVE_ADDON) return resolve(env.MAGE_NATIVE_ADDON);
  // This file is src/model/kernels/native.ts or dist/model/kernels/native.js: the package root is 3 up.
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  return join(root, "native", "build", "Release", "mage_blas.node");
}

/** Thread count from the environment: MAGE_BLAS_THREADS, else OPENBLAS_NUM_THREADS, else 1. */
export function nativeThreadsFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  for (const key of ["MAGE_BLAS_THREADS", "OPENBLAS_NUM_THREADS"]) {
    const raw = env[key];
    if (raw === undefined || raw === "") continue;
    const v = Number(raw);
    if (!Number.isInteger(v) || v < 1) {
      throw new UsageError(`environment variable ${key} must be a positive integer, got "${raw}"`);
    }
    return v;
  }
  return 1;
}

const OP_NAMES = [
  "rmsNormForward",
  "rmsNormBackward",
  "swigluForward",
  "swigluBackward",
  "rope",
  "attentionForward",
  "attentionBackward",
  "headForward",
  "headBackward",
  "adamw",
  "sumSquares",
  "attendDecode",
] as const satisfies readonly (keyof FusedOps)[];

/** The addon's fused ops, when it has all of them (the functions need no `this`). */
function opsOf(addon: Addon): FusedOps | undefined {
  if (!OP_NAMES.every((n) => typeof addon[n] === "function")) return undefined;
  const ops = Object.fromEntries(OP_NAMES.map((n) => [n, addon[n]])) as unknown as FusedOps;
  // Optional ops: an addon built before they existed still serves the others.
  if (typeof addon.causalSoftmax === "function") ops.causalSoftmax = addon.causalSoftmax;
  return ops;
}

function wrap(addon: Addon, path: string, env: NodeJS.ProcessEnv): NativeKernels {
  return {
    name: "native",
    path,
    // MAGE_NATIVE_OPS=0 keeps only the GEMM (to measure what the fused ops bring).
    ops: env.MAGE_NATIVE_OPS === "0" ? undefined : opsOf(addon),
    threads: () => addon.getThreads(),
    setThreads(t: number) {
      if (!Number.isInteger(t) || t < 1)
        throw new RangeError(`native threads must be a positive integer, got ${t}`);
      addon.setThreads(t);
    },
    gemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc) {
      checkGemmArgs("native", transA, transB, m, n, k, a, aOff, lda, b, bOff, ldb, c, cOff, ldc);
      if (m === 0 || n === 0) return;
      // OpenBLAS honours beta = 0 (C is not read) but may skip work differently for k = 0; keep the contract in one place.
      if (k === 0 || alpha === 0) {
        scaleC(m, n, beta, c, cOff, ldc);
        return;
      }
      addon.sgemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc);
    },
  };
}

const cache = new Map<string, NativeStatus>();

/**
 * Loads the addon (once per path) and reports whether it is usable, with the reason when not.
 * Never throws for a missing or broken addon (the caller decides whether that is an error); throws a
 * UsageError for a malformed MAGE_BLAS_THREADS / OPENBLAS_NUM_THREADS.
 */
export function nativeStatus(env: NodeJS.ProcessEnv = process.env): NativeStatus {
  const path = nativeAddonPath(env);
  const known = cache.get(path);
  if (known) return known;
  const threads = nativeThreadsFromEnv(env);
  let status: NativeStatus;
  if (!existsSync(path)) {
    status = { available: false, reason: `native kernel addon not found at ${path}` };
  } else {
    try {
      const addon = createRequire(import.meta.url)(path) as Addon;
      const kernels = wrap(addon, path, env);
      kernels.setThreads(threads);
      status = { available: true, kernels };
    } catch (e) {
      status = {
        available: false,
        reason: `native kernel addon at ${path} failed to load: ${(e as Error).message}`,
      };
    }
  }
  cache.set(path, status);
  return status;
}

/** The native kernel, or an Error saying why it is unavailable and how to build it. */
export function nativeKernels(env: NodeJS.ProcessEnv = process.env): NativeKernels {
  const s = nativeStatus(env);
  if (s.available) return s.kernels;
  throw new Error(`${s.reason}; ${NATIVE_HELP}`);
}
