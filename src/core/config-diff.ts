/**
 * Leaf-level differences between a stored config (a run directory's `config.yaml`, a summary's
 * `config`) and the one about to be used, as `path: stored → current` lines.
 *
 * A key present on only one side is not a difference: files written before a field was added to
 * the schema lack it, and the field's default then applies to both. Arrays differ when their
 * lengths do, otherwise item by item.
 */
export function configDifferences(
  stored: unknown,
  current: unknown,
  ignore: (path: string) => boolean = () => false,
): string[] {
  const out: string[] = [];
  walk(stored, current, "", ignore, out);
  return out;
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function show(x: unknown): string {
  return x === undefined ? "unset" : JSON.stringify(x);
}

function walk(a: unknown, b: unknown, path: string, ignore: (p: string) => boolean, out: string[]): void {
  if (path !== "" && ignore(path)) return;
  if (isRecord(a) && isRecord(b)) {
    for (const key of Object.keys(a)) {
      if (key in b) walk(a[key], b[key], path === "" ? key : `${path}.${key}`, ignore, out);
    }
    return;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) {
      out.push(`${path}: ${a.length} items → ${b.length} items`);
      return;
    }
    for (let i = 0; i < a.length; i++) walk(a[i], b[i], `${path}[${i}]`, ignore, out);
    return;
  }
  if (a !== b) out.push(`${path || "(root)"}: ${show(a)} → ${show(b)}`);
}

/**
 * Config fields that say how a run's processes run, not what they compute: where its curves are
 * logged, which Python runs the worker, how long the trainer waits for it, and the byte budget of
 * the worker's prefix store (a sample with reuse equals a fresh prefill's), and whether the lean
 * decoder's steps run as CUDA graphs (the same kernels either way), and which interpreter, port and start
 * timeout the managed vLLM server (`rollout: vllm`) gets. Two runs that differ
 * only here are the same run: a grid reuses its results and `--resume` continues it.
 */
const RUNTIME_ONLY =
  /^(logging(\..*)?|model\.torch\.(python|timeoutSeconds|prefixCacheMB|cudaGraphs|vllm\.(python|port|startTimeoutS)))$/;

export function isRuntimeOnlyField(path: string): boolean {
  return RUNTIME_ONLY.test(path);
}
