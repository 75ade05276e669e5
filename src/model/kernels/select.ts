import { UsageError } from "../../core/errors.js";
import { jsKernels } from "./js.js";
import { NATIVE_HELP, nativeStatus } from "./native.js";
import type { Kernels } from "./types.js";
import { wasmKernels, wasmSimdSupported } from "./wasm.js";

/**
 * Run-time choice of GEMM kernel. "auto" takes the fastest one that loads here:
 * native (OpenBLAS addon) > wasm (SIMD WebAssembly) > js. The environment variable MAGE_KERNELS,
 * when set, overrides the preference passed in (so a run can be switched without editing a config).
 * The chosen kernel's `name` is what checkpoints and metrics record.
 */

export const KERNEL_PREFERENCES = ["auto", "js", "wasm", "native"] as const;
export type KernelPreference = (typeof KERNEL_PREFERENCES)[number];

function wasmOrReason(): { kernels?: Kernels; reason?: string } {
  if (!wasmSimdSupported()) {
    return { reason: "this JavaScript engine lacks WebAssembly SIMD (Node ≥ 16.4 has it)" };
  }
  try {
    return { kernels: wasmKernels() };
  } catch (e) {
    return { reason: `wasm kernels failed to start: ${(e as Error).message}` };
  }
}

/** Every kernel that loads in this process, slowest first: js, then wasm and native where available. */
export async function availableKernels(env: NodeJS.ProcessEnv = process.env): Promise<Kernels[]> {
  const out: Kernels[] = [jsKernels];
  const wasm = wasmOrReason().kernels;
  if (wasm) out.push(wasm);
  const native = nativeStatus(env);
  if (native.available) out.push(native.kernels);
  return out;
}

/**
 * The kernel to use. `preference` is "auto" (native if loadable, else wasm, else js) or an explicit
 * name; MAGE_KERNELS in `env` overrides it. An explicit choice that cannot load is a UsageError saying
 * why and how to get it; an unknown name is a UsageError listing the valid ones.
 */
export async function selectKernels(
  preference: KernelPreference | string = "auto",
  env: NodeJS.ProcessEnv = process.env,
): Promise<Kernels> {
  const fromEnv = env.MAGE_KERNELS !== undefined && env.MAGE_KERNELS !== "";
  const raw = fromEnv ? (env.MAGE_KERNELS as string) : preference;
  const source = fromEnv ? "MAGE_KERNELS" : "kernels";
  if (!(KERNEL_PREFERENCES as readonly string[]).includes(raw)) {
    throw new UsageError(`unknown ${source} "${raw}"; valid choices: ${KERNEL_PREFERENCES.join(", ")}`);
  }
  const want = raw as KernelPreference;
  if (want === "js") return jsKernels;
  if (want === "native" || want === "auto") {
    const native = nativeStatus(env);
    if (native.available) return native.kernels;
    if (want === "native") {
      throw new UsageError(`${source} "native" is unavailable: ${native.reason}; ${NATIVE_HELP}`);
    }
  }
  const wasm = wasmOrReason();
  if (wasm.kernels) return wasm.kernels;
  if (want === "wasm") {
    throw new UsageError(`${source} "wasm" is unavailable: ${wasm.reason}; use "js" or a newer Node`);
  }
  return jsKernels;
}
