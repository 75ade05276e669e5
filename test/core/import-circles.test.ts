import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";

/**
 * No two modules import each other, directly or around a circle: TypeScript imports under src/
 * (`import type` included, since a type-only circle still ties two files together) and the Python
 * packages' imports (function-level and `TYPE_CHECKING` ones included). docs/design.md,
 * "Conventions", says where shared pieces go instead.
 */

function files(dir: string, ext: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p, ext) : p.endsWith(ext) ? [p] : [];
  });
}

/** Strongly connected components with more than one module (Tarjan). */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1) out.push(scc.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

function typescriptGraph(root: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const f of files(root, ".ts")) {
    const text = readFileSync(f, "utf8");
    const deps = [...text.matchAll(/^(?:import|export)\s[^;]*?from\s+"(\.[^"]+)"/gms)].map((m) =>
      relative(".", resolve(dirname(f), m[1]).replace(/\.js$/, ".ts")),
    );
    graph.set(relative(".", f), deps);
  }
  return graph;
}

/** Python modules by dotted name, and the modules each imports (relative and absolute). */
function pythonGraph(root: string, packages: readonly string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const pkg of packages) {
    for (const f of files(join(root, pkg), ".py")) {
      const name = relative(root, f)
        .replace(/\.py$/, "")
        .replaceAll("/", ".")
        .replace(/\.__init__$/, "");
      const here = f.endsWith("__init__.py") ? name : name.slice(0, name.lastIndexOf("."));
      const deps: string[] = [];
      for (const m of readFileSync(f, "utf8").matchAll(
        /^\s*from\s+(\.*)([\w.]*)\s+import\s+\(?([\w\s,]+)/gm,
      )) {
        const up = here.split(".").slice(0, here.split(".").length - Math.max(0, m[1].length - 1));
        const base = m[1] === "" ? m[2] : [...up, m[2]].filter(Boolean).join(".");
        deps.push(base, ...m[3].split(",").map((n) => `${base}.${n.trim().split(/\s+/)[0]}`));
      }
      for (const m of readFileSync(f, "utf8").matchAll(/^\s*import\s+([\w.]+)/gm)) deps.push(m[1]);
      graph.set(
        name,
        deps.filter((d) => d !== name),
      );
    }
  }
  return graph;
}

test("no import circles among the TypeScript modules", () => {
  assert.deepEqual(circles(typescriptGraph("src")), []);
});

test("no import circles among the Python modules", () => {
  const graph = pythonGraph("python", ["mage_learner", "mage_envs", "mage_logging"]);
  assert.ok(
    graph.has("mage_learner.learner") && graph.get("mage_learner.learner")!.includes("mage_learner.fsdp"),
  );
  assert.deepEqual(circles(graph), []);
});

test("a circle is found however long, and only once", () => {
  const g = new Map([
    ["a", ["b"]],
    ["b", ["c"]],
    ["c", ["a", "d"]],
    ["d", []],
    ["e", ["e2"]],
    ["e2", ["e"]],
  ]);
  assert.deepEqual(circles(g).sort(), [
    ["a", "b", "c"],
    ["e", "e2"],
  ]);
});
