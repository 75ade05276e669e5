import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { openTorchPlayers } from "../../src/league/torch-players.js";
import type { TorchLearner } from "../../src/learner/torch/learner.js";
import { TorchPolicy } from "../../src/learner/torch/policy.js";
import { readSafetensors } from "../../src/model/safetensors.js";
import type { GenerateRequest } from "../../src/policy/types.js";
import { loadConfig } from "../../src/train/config.js";
import { train } from "../../src/train/trainer.js";
import { NO_WORKER, saveTinyHf } from "../learner/tiny-hf.js";

/**
 * A league with `model.backend: torch` and LoRA against the real PyTorch worker on a tiny exported
 * Llama: snapshots are adapters played through the training worker, the pool is capped, a
 * resumed run goes on exactly, and `mage eval` and `mage league` play the snapshots afterwards.
 */

/** Timings, memory and prefix reuse vary between runs and processes. */
function isVolatile(key: string): boolean {
  return key.endsWith("_ms") || key === "wall_s" || key === "worker_peak_rss_mb" || key === "prompt_reuse";
}

function metricsOf(dir: string): Record<string, number>[] {
  return readFileSync(join(dir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .map(
      (m) => Object.fromEntries(Object.entries(m).filter(([k]) => !isVolatile(k))) as Record<string, number>,
    );
}

function snapshotsPlayed(m: Record<string, number>): string[] {
  return Object.keys(m)
    .filter((k) => k.startsWith("success/snapshot:"))
    .map((k) => k.slice("success/".length))
    .sort();
}

function leagueState(run: string, iteration: number) {
  const ck = join(run, "checkpoints", `iter-${String(iteration).padStart(6, "0")}`);
  return JSON.parse(readFileSync(join(ck, "training-state.json"), "utf8")).league;
}

async function adapterTensors(dir: string): Promise<Map<string, Float32Array>> {
  const file = await readSafetensors(join(dir, "adapter_model.safetensors"));
  return new Map([...file.tensors].map(([k, t]) => [k, t.data as Float32Array]));
}

function cli(args: string[]) {
  return spawnSync(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
    encoding: "utf8",
    timeout: 300_000,
  });
}

const quiet = { progress: false, log: () => {} } as const;

describe("a torch LoRA league", { skip: NO_WORKER }, () => {
  let root: string;
  let straight: string;

  function config(iterations: number) {
    const path = join(root, `run-${iterations}.yaml`);
    writeFileSync(
      path,
      [
        "name: torch-league-test",
        "seed: 3",
        "game: kuhn",
        `model: { backend: torch, torch: { path: ${JSON.stringify(join(root, "hf"))}, microBatchTokens: 256, lora: { rank: 4, targetModules: [q_proj, v_proj] } } }`,
        "task: { attempts: 2, maxTurns: 2 }",
        "population: { opponents: [{ spec: aggressive }], league: { every: 1, share: 0.5, sampling: uniform, maxSnapshots: 2 } }",
        "rollout: { tasksPerIteration: 4, groupSize: 2, maxResponseTokens: 6 }",
        "optim: { lr: 5.0e-2, miniBatchRows: 8 }",
        `train: { iterations: ${iterations}, checkpointEvery: 1, keepLast: 1 }`,
        "eval: { every: 0, trials: 2, finalTrials: 2, cells: [{ opponent: aggressive, seat: first }, { opponent: 'snapshot:latest', seat: second }] }",
        "",
      ].join("\n"),
    );
    return loadConfig(path);
  }

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "mage-torch-league-"));
    await saveTinyHf(join(root, "hf"), { seed: 4, contextLength: 512 });
    straight = join(root, "straight");
    await train({ config: config(4), outDir: straight, resume: false, ...quiet });
  });

  it("snapshots are the LoRA adapter alone, played by the sampler and capped; the newest is the final weights", async () => {
    const ms = metricsOf(straight);
    assert.equal(ms.length, 4);
    assert.deepEqual(
      ms.map((m) => m["league/snapshots"]),
      [1, 2, 2, 2], // metrics are recorded before the iteration's own snapshot is taken
    );
    const played = ms.flatMap(snapshotsPlayed);
    assert.ok(played.length >= 4, `snapshots played: ${played}`);
    for (const m of ms) {
      assert.equal(m["league/snapshot_share"], 0.5);
      assert.ok(m["league/snapshot_invalid"] >= 0, "the snapshots answered their moves");
      assert.ok(Number.isFinite(m["rating/agent"]));
    }
    // Snapshots after 0..4 iterations; the pool keeps the newest two and the others' folders go.
    assert.deepEqual(
      leagueState(straight, 4).snapshots.map((s: { iteration: number }) => s.iteration),
      [3, 4],
    );
    assert.deepEqual(readdirSync(join(straight, "league")).sort(), ["snapshot-000003", "snapshot-000004"]);
    const snap = join(straight, "league", "snapshot-000004");
    assert.deepEqual(readdirSync(snap).sort(), ["learner", "meta.json", "torch.json", "training-state.json"]);
    assert.deepEqual(readdirSync(join(snap, "learner")).sort(), [
      "adapter_config.json",
      "adapter_model.safetensors",
    ]);
    assert.equal(JSON.parse(readFileSync(join(snap, "torch.json"), "utf8")).adapterOnly, true);
    // Snapshot 4 is the adapter of checkpoint 4 (taken after the same iteration), not the start.
    const a = await adapterTensors(join(snap, "learner"));
    const b = await adapterTensors(join(straight, "checkpoints", "iter-000004", "learner"));
    assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort());
    for (const [k, t] of a) assert.deepEqual(t, b.get(k), k);
    const s3 = await adapterTensors(join(straight, "league", "snapshot-000003", "learner"));
    assert.ok(
      [...a].some(([k, t]) => t.some((x, i) => x !== s3.get(k)![i])),
      "the adapter moved between snapshots",
    );
    // The final evaluation played the newest snapshot.
    const summary = JSON.parse(readFileSync(join(straight, "summary.json"), "utf8"));
    const cell = summary.finalEval.cells.find((c: { opponent: string }) => c.opponent === "snapshot:latest");
    assert.equal(cell.snapshot, "snapshot:4");
  });

  it("a run stopped after 2 iterations and resumed ends where the uninterrupted run ends: pool, ratings and draws", async () => {
    const resumed = join(root, "resumed");
    await train({ config: config(2), outDir: resumed, resume: false, ...quiet });
    await train({ config: config(4), outDir: resumed, resume: true, ...quiet });
    assert.deepEqual(metricsOf(resumed), metricsOf(straight));
    assert.deepEqual(leagueState(resumed, 4), leagueState(straight, 4));
    const sa = JSON.parse(readFileSync(join(resumed, "summary.json"), "utf8"));
    const sb = JSON.parse(readFileSync(join(straight, "summary.json"), "utf8"));
    assert.deepEqual(sa.finalEval, sb.finalEval);
  });

  it("a snapshot samples through the worker as its adapter, not as the learner's own weights", async () => {
    const players = await openTorchPlayers([
      { name: "s3", dir: join(straight, "league", "snapshot-000003") },
      { name: "s4", dir: join(straight, "league", "snapshot-000004") },
      { name: "ck4", dir: join(straight, "checkpoints", "iter-000004") },
    ]);
    try {
      assert.equal(players.workers, 1, "adapters of one base share a worker");
      const req: GenerateRequest = {
        messages: [{ role: "user", content: "Your move in Kuhn poker: check or bet?" }],
        sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 24, stop: [] },
        seed: 11,
      };
      const [s3, s4, ck4] = await Promise.all(
        ["s3", "s4", "ck4"].map(async (n) => (await players.policies.get(n)!.generate([req]))[0]),
      );
      assert.deepEqual(s4.tokenIds, ck4.tokenIds, "the snapshot after iteration 4 is checkpoint 4's adapter");
      assert.notDeepEqual(s4.logprobs, s3.logprobs);
      const learner = (players.policies.get("s3") as TorchPolicy).learner as TorchLearner;
      const [own] = await new TorchPolicy(learner).generate([req]);
      assert.notDeepEqual(own.logprobs, s3.logprobs, "the worker's own (fresh) adapter is not a snapshot's");
    } finally {
      await players.close();
    }
  });

  it("mage eval plays snapshot:latest from a run checkpoint, and mage league rates the snapshots and the final checkpoint", () => {
    const out = join(root, "eval.jsonl");
    const e = cli([
      "eval",
      "--checkpoint",
      straight,
      "--opponent",
      "snapshot:latest",
      "--trials",
      "2",
      "--attempts",
      "1",
      "--out",
      out,
      "--json",
    ]);
    assert.equal(e.status, 0, e.stderr);
    const res = JSON.parse(e.stdout.trim().split("\n").pop()!);
    assert.equal(res.cells[0].opponent, "snapshot:latest");
    assert.equal(res.cells[0].snapshot, "snapshot:4");
    assert.equal(readFileSync(out, "utf8").trim().split("\n").length, 2);

    const table = join(root, "league.json");
    const l = cli([
      "league",
      "--snapshots",
      straight,
      "--checkpoint",
      straight,
      "--players",
      "aggressive",
      "--deals",
      "2",
      "--out",
      table,
    ]);
    assert.equal(l.status, 0, l.stderr);
    const res2 = JSON.parse(readFileSync(table, "utf8"));
    assert.deepEqual(
      res2.table.map((r: { name: string }) => r.name).sort(),
      ["aggressive", `model:${straight}`, "snapshot:3", "snapshot:4"].sort(),
    );
    // 4 players, every pair 2 deals in both seats: each player 3 × 4 games.
    for (const r of res2.table) assert.equal(r.games, 12, r.name);
    assert.ok(existsSync(table));
  });
});
