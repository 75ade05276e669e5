import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { describe, it } from "node:test";
import { penalisedScore } from "../../src/algo/penalties.js";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import { measureDiversity } from "../../src/evaluate/diversity.js";
import {
  evalTaskSeed,
  evaluate,
  HARDER_SEED_RANGE,
  HELD_OUT_SEED_RANGE,
  TRAIN_SEED_RANGE,
} from "../../src/evaluate/evaluate.js";
import { planExperiment, pretrainArgs, readExperiment } from "../../src/experiment/spec.js";
import { solve } from "../../src/games/sokoban/index.js";
import { ScriptedAgent } from "../../src/policy/scripted-agent.js";
import { runTrials } from "../../src/rollout/runner.js";
import type { TrialSpec } from "../../src/rollout/types.js";
import { MinesweeperTask } from "../../src/tasks/minesweeper.js";
import { loadTask } from "../../src/tasks/registry.js";
import { SokobanTask } from "../../src/tasks/sokoban.js";
import { newEnvClock, timedTask } from "../../src/tasks/timed.js";
import { loadConfig, parseKnobsArg, taskKnobOptions, validateConfig } from "../../src/train/config.js";
import { iterationSpecs } from "../../src/train/iteration.js";
import {
  buildCorpus,
  imperfectSokobanMoves,
  minesNamedInReflections,
  minesweeperDeductions,
  unskilledBehaviour,
} from "../../src/train/pretrain/corpus.js";

const GAMES = ["sokoban", "minesweeper"] as const;
const METHODS = ["lamer", "mage", "grpo", "gigpo", "zeroshot", "reflexion"] as const;

function errorOf(f: () => unknown): Error {
  try {
    f();
  } catch (err) {
    return err as Error;
  }
  assert.fail("expected an error");
}

describe("puzzle presets", () => {
  it("every preset validates with the reference's settings", () => {
    for (const game of GAMES) {
      for (const method of METHODS) {
        const c = loadConfig(`configs/${game}-${method}.yaml`);
        assert.equal(c.game, game);
        assert.equal(c.credit.stepGamma, 0.95);
        assert.equal(c.credit.trajGamma, game === "sokoban" ? 0.9 : 0.6);
        assert.equal(c.penalties.invalidAction, 0.5);
        assert.equal(c.task.maxTurns, 7);
        assert.equal(c.advantage.scope, "task", "no opponent: task scope");
        assert.notEqual(c.eval.harder, null, `${game}-${method} evaluates the harder set`);
        const rl = method === "grpo" || method === "gigpo";
        assert.equal(c.task.attempts, rl ? 1 : 3);
        assert.equal(c.rollout.groupSize, rl ? 24 : 8, "RL baselines: a group three times larger");
        if (rl || method === "zeroshot") {
          assert.equal(c.eval.attempts, 3);
          assert.equal(c.eval.reflection, "none");
        }
        if (method === "mage") assert.equal(c.credit.mode, "differential");
        if (method === "lamer") assert.equal(c.credit.mode, "per-attempt");
        assert.equal(c.train.updates, method !== "zeroshot" && method !== "reflexion");
      }
    }
  });

  it("no preset pays a well-formed answer or reflection less than a broken one", () => {
    // Reflections run to ~30 tokens; a length ramp from maxResponseTokens/2 once made a valid
    // 32-token reflection cost more than an invalid 10-token one, and LaMer learned to break them.
    for (const game of GAMES) {
      for (const method of METHODS) {
        const c = loadConfig(`configs/${game}-${method}.yaml`);
        const opts = {
          invalidActionCoef: c.penalties.invalidAction,
          lengthCoef: c.penalties.length,
          maxResponseTokens: c.rollout.maxResponseTokens,
        };
        const brokenShort = penalisedScore(0, false, 8, opts);
        for (let n = 1; n < c.rollout.maxResponseTokens; n++)
          assert.ok(
            penalisedScore(0, true, n, opts) > brokenShort,
            `${game}-${method}: a valid ${n}-token answer scores no better than a broken 8-token one`,
          );
      }
    }
  });

  it("every puzzle preset in configs/ is one of the twelve", () => {
    const files = readdirSync("configs").filter((f) => /^(sokoban|minesweeper)-/.test(f));
    assert.equal(files.length, 12);
  });

  it("the experiment grids plan 6 methods × 3 paired seeds with scaling to 5 attempts", () => {
    for (const game of GAMES) {
      const file = `configs/experiments/${game}-main.yaml`;
      const plan = planExperiment(readExperiment(file), file);
      assert.equal(plan.runs.length, 18);
      assert.equal(plan.pretrains.length, 3, "one shared base per seed");
      for (const r of plan.runs) {
        assert.equal(r.config.eval.scaling?.attempts, 5);
        assert.equal(r.config.game, game);
      }
      // The base is pretrained with the preset's corpus player (epsilon from the defaults).
      const args = pretrainArgs(plan.pretrains[0]);
      assert.ok(args.includes(game));
      // The Sokoban presets' easier levels reach the corpus: the base is pretrained on them.
      if (game === "sokoban")
        assert.equal(args[args.indexOf("--knobs") + 1], "{boxes: 1, minSteps: 2, maxSolSteps: 8}");
    }
  });
});

describe("difficulty knobs", () => {
  it("bad values name the field", () => {
    const base = { game: "sokoban" };
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ ...base, task: { sokoban: { boxes: 0 } } }, /task\.sokoban\.boxes/],
      [{ ...base, task: { sokoban: { roomSize: [3, 6] } } }, /task\.sokoban\.roomSize/],
      [
        { ...base, task: { sokoban: { minSteps: 9, maxSolSteps: 5 } } },
        /task\.sokoban\.minSteps: must be at most/,
      ],
      [{ ...base, task: { sokoban: { walls: 2 } } }, /task\.sokoban/],
      [{ game: "minesweeper", task: { minesweeper: { mines: 40 } } }, /task\.minesweeper\.mines/],
      [
        { game: "kuhn", eval: { harder: { trials: 5 } }, population: { opponents: [{ spec: "cfr" }] } },
        /eval\.harder/,
      ],
      [{ game: "kuhn" }, /population\.opponents/],
    ];
    for (const [raw, re] of cases) {
      const err = errorOf(() => validateConfig(raw));
      assert.ok(err instanceof UsageError);
      assert.match(err.message, re);
    }
    const flag = errorOf(() => parseKnobsArg("sokoban", "boxes: -1"));
    assert.match(flag.message, /--knobs boxes/);
    assert.match(
      errorOf(() => parseKnobsArg("kuhn", "boxes: 1")).message,
      /for sokoban, minesweeper, tictactoe, not kuhn/,
    );
    const cells = errorOf(() => parseKnobsArg("tictactoe", "cells: hex"));
    assert.match(cells.message, /--knobs cells/);
    assert.match(cells.message, /valid fields: cells/);
    assert.deepEqual(parseKnobsArg("tictactoe", "cells: digits"), { tictactoe: { cells: "digits" } });
  });

  it("forwards knobs to the engines; the harder knobs lay over the training ones", async () => {
    const c = validateConfig({
      game: "sokoban",
      task: { sokoban: { roomSize: [7, 7], boxes: 1, minSteps: 3, maxSolSteps: 12, maxSteps: 20 } },
      eval: { harder: { trials: 4, sokoban: { boxes: 2 } } },
    });
    const train = taskKnobOptions(c.game, c.task);
    assert.deepEqual(train, {
      knobs: { roomSize: [7, 7], numBoxes: 1, minSteps: 3, maxSolSteps: 12 },
      maxSteps: 20,
    });
    const harder = taskKnobOptions(c.game, c.task, c.eval.harder!);
    assert.equal(harder.knobs?.numBoxes, 2);
    assert.deepEqual(harder.knobs?.roomSize, [7, 7]);
    const def = await loadTask("sokoban");
    const task = def.create(train) as SokobanTask;
    await task.reset(Rng.seeded(3));
    assert.equal(task.currentLevel!.room.rows, 7);
    assert.equal(task.currentState.boxes.length, 1);
    const ms = validateConfig({ game: "minesweeper", task: { minesweeper: { rows: 5, cols: 7, mines: 4 } } });
    const mt = (await loadTask("minesweeper")).create(
      taskKnobOptions("minesweeper", ms.task),
    ) as MinesweeperTask;
    await mt.reset(Rng.seeded(1));
    assert.equal(mt.currentBoard.rows, 5);
    assert.equal(mt.currentBoard.cols, 7);
    assert.equal(mt.currentBoard.numMines, 4);
  });

  it("produces only solvable Sokoban levels within the solution window", async () => {
    const settings = [
      {},
      { roomSize: [7, 7] as [number, number] },
      { boxes: 1, minSteps: 3, maxSolSteps: 10 },
    ];
    for (const knobs of settings) {
      const opts = taskKnobOptions("sokoban", { sokoban: knobs });
      const lo = knobs.minSteps ?? 5;
      const hi = knobs.maxSolSteps ?? 21;
      for (let i = 0; i < 12; i++) {
        const task = new SokobanTask(opts as ConstructorParameters<typeof SokobanTask>[0]);
        await task.reset(Rng.seeded("knobs").derive(JSON.stringify(knobs), i));
        const r = solve(task.currentState, { maxDepth: 100 });
        assert.equal(r.status, "solved", `level ${i} of ${JSON.stringify(knobs)} is solvable`);
        if (r.status === "solved") {
          assert.ok(r.moves.length >= lo && r.moves.length <= hi, `${r.moves.length} in [${lo}, ${hi}]`);
        }
      }
    }
  });
});

describe("seed ranges", () => {
  it("are pairwise disjoint", () => {
    const ranges = [TRAIN_SEED_RANGE, HELD_OUT_SEED_RANGE, HARDER_SEED_RANGE];
    for (let a = 0; a < ranges.length; a++)
      for (let b = a + 1; b < ranges.length; b++)
        assert.ok(ranges[a][1] <= ranges[b][0] || ranges[b][1] <= ranges[a][0]);
  });

  it("training, evaluation and harder levels never overlap (property over run seeds)", () => {
    const inRange = (x: number, [lo, hi]: readonly [number, number]) =>
      Number.isInteger(x) && x >= lo && x < hi;
    const config = loadConfig("configs/sokoban-lamer.yaml");
    const trainSeeds = new Set<number>();
    const evalSeeds = new Set<number>();
    const harderSeeds = new Set<number>();
    for (let seed = 0; seed < 20; seed++) {
      for (let it = 0; it < 5; it++) {
        const rng = Rng.seeded(seed).derive("iteration", it);
        for (const s of iterationSpecs({ ...config, seed }, rng, false)) {
          assert.ok(inRange(s.taskSeed, TRAIN_SEED_RANGE));
          trainSeeds.add(s.taskSeed);
        }
      }
      const root = Rng.seeded(seed).derive("eval");
      for (let i = 0; i < 50; i++) {
        const e = evalTaskSeed(root, i, HELD_OUT_SEED_RANGE);
        const h = evalTaskSeed(root, i, HARDER_SEED_RANGE);
        assert.ok(inRange(e, HELD_OUT_SEED_RANGE));
        assert.ok(inRange(h, HARDER_SEED_RANGE));
        evalSeeds.add(e);
        harderSeeds.add(h);
      }
    }
    for (const s of evalSeeds) assert.ok(!trainSeeds.has(s) && !harderSeeds.has(s));
    for (const s of harderSeeds) assert.ok(!trainSeeds.has(s));
  });

  it("the harder evaluation plays the harder seeds and knobs", async () => {
    const def = await loadTask("minesweeper");
    const agent = new ScriptedAgent("p", unskilledBehaviour("minesweeper", { epsilon: 0.5 }));
    const res = await evaluate(agent, {
      task: def,
      cells: [{ opponent: null, seat: null, unseen: true }],
      trials: 4,
      attempts: 1,
      reflection: "none",
      promptStyle: "compact",
      maxTurns: 7,
      sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] },
      seed: 0,
      seedRange: HARDER_SEED_RANGE,
      taskOptions: taskKnobOptions("minesweeper", { minesweeper: { mines: 5 } }),
    });
    for (const t of res.trials) {
      assert.ok(t.taskSeed >= HARDER_SEED_RANGE[0] && t.taskSeed < HARDER_SEED_RANGE[1]);
      assert.match(t.memory.attempts[0].compactInitialObservation, /\?/);
    }
  });
});

describe("multi-attempt puzzle trials", () => {
  for (const game of GAMES) {
    it(`${game}: every attempt restarts the identical level, and group members share it`, async () => {
      const def = await loadTask(game);
      // A player that never solves (random moves), so every trial plays all 3 attempts.
      const agent = new ScriptedAgent("random", unskilledBehaviour(game, { malformedRate: 0 }));
      const specs: TrialSpec[] = Array.from({ length: 8 }, (_, i) => ({
        trialId: i,
        groupId: Math.floor(i / 2),
        taskSeed: 1000 + Math.floor(i / 2),
        opponent: null,
        seat: null,
      }));
      const trials = await runTrials(specs, () => def.create({}), agent, Rng.seeded(9), {
        attempts: 3,
        maxTurns: 7,
        reflection: "reflection_only",
        promptStyle: "compact",
        hindsight: false,
        sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] },
        maxBatch: 64,
        concurrency: 1,
      });
      let multi = 0;
      for (const t of trials) {
        const starts = t.memory.attempts.map((a) => a.compactInitialObservation);
        if (starts.length > 1) multi++;
        for (const s of starts)
          assert.equal(s, starts[0], `trial ${t.trialId}: identical start in every attempt`);
        const mate = trials[t.trialId ^ 1];
        assert.equal(mate.memory.attempts[0].compactInitialObservation, starts[0], "same seed, same level");
      }
      assert.ok(multi >= 4, `most random trials play more than one attempt (${multi})`);
    });
  }

  it("minesweeper: the first reveal is safe, opens cells, and is identical across attempts", async () => {
    for (let i = 0; i < 30; i++) {
      const task = new MinesweeperTask({ knobs: i % 2 === 0 ? {} : { mines: 5 } });
      await task.reset(Rng.seeded("first-reveal").derive(i));
      const first = task.currentBoard;
      assert.equal(first.status, "playing");
      assert.ok(first.openedSafe >= 1);
      first.revealed.forEach((open, c) => {
        if (open) assert.equal(first.mines[c], false, "no opened cell is a mine");
      });
      // play some random reveals, then restart: the identical opened board comes back
      const rng = Rng.seeded("moves").derive(i);
      for (let k = 0; k < 5 && !task.done; k++)
        await task.step(`<action>(${1 + rng.int(6)}, ${1 + rng.int(6)})</action>`);
      task.restart();
      assert.equal(task.currentBoard, first, "restart brings back the identical opened board");
    }
  });
});

describe("the imperfect scripted players", () => {
  it("sokoban: ε = 0 follows the BFS solution; ε = 1 is random", () => {
    // a corridor: push the box right onto the target
    const level = ["#######", "#P_X_O#", "#######"];
    assert.deepEqual(imperfectSokobanMoves(level, 3, Rng.seeded(1), 0), ["right", "right", "right"]);
    // ε = 1: a random direction, and the turn stops there (the plan no longer applies)
    const random = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const moves = imperfectSokobanMoves(level, 3, Rng.seeded(i), 1)!;
      assert.equal(moves.length, 1);
      random.add(moves[0]);
    }
    assert.equal(random.size, 4);
  });

  it("minesweeper: the deductions find the safe cells and the mines", () => {
    // The 1 at (0,0) has one closed neighbour, (1,0): a mine.
    const e = minesweeperDeductions(["1.", "?."]);
    assert.deepEqual(e, { safe: [], mines: [2] });
    // The 1s at (2,0) and (2,1) see only (1,0) closed: a mine; then the 1 at (0,1), which sees
    // (0,0) and (1,0), is satisfied, so (0,0) is safe.
    const g = minesweeperDeductions(["?1.", "?1.", "11."]);
    assert.deepEqual(g, { safe: [0], mines: [3] });
    // Nothing is provable on a 1 with two closed neighbours.
    assert.deepEqual(minesweeperDeductions(["1?", "??"]).safe, []);
  });

  it("ε orders the scripted players' success (the corpus player's rate is written down)", async () => {
    for (const game of GAMES) {
      const rate = async (epsilon: number) => {
        const c = await buildCorpus({ game, trials: 40, rng: Rng.seeded(2), epsilon });
        return (c.stats.wonFirst ?? 0) / c.stats.trials;
      };
      const [skilled, random] = [await rate(0), await rate(1)];
      assert.ok(skilled > random + 0.2, `${game}: ε=0 ${skilled} vs ε=1 ${random}`);
    }
  });
});

describe("bounded Sokoban reflections", () => {
  const reflections = (c: Awaited<ReturnType<typeof buildCorpus>>) =>
    c.trials.flatMap((t) =>
      t.messages
        .filter((_, i) => i > 0)
        .flatMap((m) => (m.role === "assistant" && m.content.startsWith("<remark>") ? [m.content] : [])),
    );
  const listed = (r: string) => (r.match(/\b(up|down|left|right)\b/g) ?? []).length;

  it("list at most reflectionMoves moves and count the rest; 0 keeps every move", async () => {
    const opts = { game: "sokoban", trials: 30, rng: Rng.seeded(3), epsilon: 1 };
    const all = reflections(await buildCorpus(opts));
    const bounded = reflections(await buildCorpus({ ...opts, reflectionMoves: 4 }));
    assert.equal(bounded.length, all.length, "the same trials, reflected on");
    assert.ok(
      all.some((r) => listed(r) > 4),
      "random play makes long attempts",
    );
    assert.deepEqual(
      bounded.filter((r) => listed(r) > 4),
      [],
      "no reflection lists more than 4 moves",
    );
    const counted = bounded.filter((r) => /and \d+ more/.test(r));
    assert.ok(counted.length > 0, "some reflections count the moves left out");
    for (const r of counted) assert.equal(listed(r), 4);
    assert.deepEqual(reflections(await buildCorpus({ ...opts, reflectionMoves: 0 })), all);
    assert.ok(
      Math.max(...bounded.map((r) => r.length)) < Math.max(...all.map((r) => r.length)),
      "the longest reflection is shorter",
    );
  });

  it("in MineSweeper, list at most reflectionMoves cells and still name the mine", async () => {
    const opts = { game: "minesweeper", trials: 30, rng: Rng.seeded(4), epsilon: 1 };
    const cells = (r: string) => (r.match(/\(\d+, \d+\)(?! was a mine)/g) ?? []).length;
    const all = reflections(await buildCorpus(opts));
    const bounded = reflections(await buildCorpus({ ...opts, reflectionMoves: 2 }));
    assert.equal(bounded.length, all.length);
    assert.ok(
      all.some((r) => cells(r) > 2),
      "random play opens more than 2 cells",
    );
    assert.deepEqual(
      bounded.filter((r) => cells(r) > 2),
      [],
    );
    for (const r of bounded.filter((x) => /and \d+ more/.test(x))) assert.equal(cells(r), 2, r);
    const mines = (rs: string[]) => rs.map((r) => /\(\d+, \d+\) was a mine/.exec(r)?.[0] ?? null);
    assert.deepEqual(mines(bounded), mines(all), "the cell that was a mine is named either way");
    assert.ok(mines(all).some((m) => m !== null));
    assert.deepEqual(reflections(await buildCorpus({ ...opts, reflectionMoves: 0 })), all);
  });

  it("reject a negative or fractional bound", () => {
    assert.throws(() => unskilledBehaviour("sokoban", { reflectionMoves: -1 }), /reflectionMoves/);
    assert.throws(() => unskilledBehaviour("sokoban", { reflectionMoves: 1.5 }), /reflectionMoves/);
    assert.match(
      errorOf(() => validateConfig({ game: "sokoban", pretrain: { reflectionMoves: -2 } })).message,
      /pretrain\.reflectionMoves/,
    );
  });
});

describe("a MineSweeper corpus player that heeds its reflections", () => {
  type Trial = Awaited<ReturnType<typeof buildCorpus>>["trials"][number];
  /** Per attempt (in order) the cells it revealed, and the mines the reflections so far named. */
  const repeats = (t: Trial): number => {
    const named = new Set<string>();
    let count = 0;
    for (const m of t.messages) {
      if (m.role !== "assistant") continue;
      const cell = /^<action>\((\d+), (\d+)\)<\/action>$/.exec(m.content);
      if (cell && named.has(`${cell[1]},${cell[2]}`)) count++;
      for (const k of minesNamedInReflections([m])) named.add(k);
    }
    return count;
  };
  const opts = { game: "minesweeper", trials: 150, rng: Rng.seeded(11), epsilon: 0.25 };

  it("reads the cells a remark names as mines, and nothing outside remarks", () => {
    const named = minesNamedInReflections([
      { role: "user", content: "(1, 1) was a mine." },
      { role: "assistant", content: "<action>(2, 2)</action>" },
      { role: "assistant", content: "<remark>I opened (2, 2), (4, 5). (4, 5) was a mine. Lost.</remark>" },
      { role: "assistant", content: "<remark>Cells opened: (6, 1). (6, 1) was a mine.</remark>" },
    ]);
    assert.deepEqual([...named].sort(), ["4,5", "6,1"]);
  });

  it("never reveals a named mine again, where the plain player does; off, the corpus is unchanged", async () => {
    const plain = await buildCorpus(opts);
    const heeding = await buildCorpus({ ...opts, heedReflections: true });
    const plainRepeats = plain.trials.reduce((s, t) => s + repeats(t), 0);
    const heedRepeats = heeding.trials.reduce((s, t) => s + repeats(t), 0);
    assert.ok(plainRepeats > 0, `the plain player reveals a named mine again (${plainRepeats} times)`);
    assert.equal(heedRepeats, 0, `the heeding player never does (${heedRepeats} times)`);
    assert.ok(
      (heeding.stats.won ?? 0) > (plain.stats.won ?? 0),
      `heeding wins more trials: ${heeding.stats.won} vs ${plain.stats.won}`,
    );
    assert.equal(heeding.stats.wonFirst, plain.stats.wonFirst, "attempt 1 has no reflection to heed");
    const off = await buildCorpus({ ...opts, heedReflections: false });
    assert.deepEqual(
      off.trials.map((t) => t.messages),
      plain.trials.map((t) => t.messages),
      "heedReflections: false is the old corpus",
    );
  });

  it("is refused where it means nothing, naming the field", () => {
    assert.throws(
      () => unskilledBehaviour("sokoban", { epsilon: 0.5, heedReflections: true }),
      /minesweeper only/,
    );
    assert.throws(
      () => unskilledBehaviour("minesweeper", { epsilon: 1, heedReflections: true }),
      /epsilon < 1/,
    );
    assert.match(
      errorOf(() => validateConfig({ game: "minesweeper", pretrain: { heedReflections: "yes" } })).message,
      /pretrain\.heedReflections/,
    );
  });
});

describe("environment clock and puzzle diversity", () => {
  it("times reset, step and restart of a task", async () => {
    const clock = newEnvClock();
    const task = timedTask(new SokobanTask(), clock);
    await task.reset(Rng.seeded(4));
    await task.step("<action>up</action>");
    task.restart();
    assert.equal(clock.steps, 1);
    assert.ok(clock.ms > 0);
    assert.equal(task.done, false, "getters pass through");
  });

  it("measures attempt-1 entropy over 10 held-out levels", async () => {
    const agent = new ScriptedAgent("random", unskilledBehaviour("sokoban", { malformedRate: 0 }));
    const r = await measureDiversity(agent, { game: "sokoban", samples: 30 });
    assert.equal(r.cells.length, 10);
    assert.equal(r.opponent, "none");
    for (const c of r.cells) {
      assert.equal(c.samples, 3);
      assert.ok(c.level !== undefined && c.level >= HELD_OUT_SEED_RANGE[0]);
    }
    assert.ok(r.summary.meanEntropyBits > 0.5, "a random player is diverse");
    const solver = new ScriptedAgent(
      "solver",
      unskilledBehaviour("sokoban", { malformedRate: 0, epsilon: 0 }),
    );
    const s = await measureDiversity(solver, { game: "sokoban", samples: 30 });
    assert.equal(s.summary.meanEntropyBits, 0, "a deterministic solver plays one sequence per level");
  });
});
