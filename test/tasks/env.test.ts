import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import { CARD_NAMES } from "../../src/games/kuhn.js";
import type { ChatMessage } from "../../src/policy/types.js";
import { TrialEnv } from "../../src/tasks/env.js";
import { KuhnTask } from "../../src/tasks/kuhn.js";
import { createTask, loadTask, TASK_NAMES } from "../../src/tasks/registry.js";
import { TicTacToeTask } from "../../src/tasks/tictactoe.js";
import {
  REFLECTION_TYPES,
  type ReflectionType,
  type StepResult,
  type TaskOptions,
  type TextTask,
} from "../../src/tasks/types.js";

/** A response with a plausible action for the task's current state (sometimes garbage). */
function randomResponse(task: TextTask, rng: Rng): string {
  if (rng.int(8) === 0) return rng.pick(["no idea", "<think>hmm", "<action>???</action>", ""]);
  const obs = task.observation();
  switch (task.name) {
    case "tictactoe":
    case "minesweeper": {
      const empty = task.name === "tictactoe" ? "." : "?";
      const cells: string[] = [];
      obs
        .split("\n")
        .map((l) => l.replace(/^Row \d+: /, "").split(" "))
        .forEach((r, i) => {
          r.forEach((c, j) => {
            if (c === empty) cells.push(`(${i + 1}, ${j + 1})`);
          });
        });
      return `<think>pick</think><action>${cells.length ? rng.pick(cells) : "(1, 1)"}</action>`;
    }
    case "kuhn":
      return `<action>${rng.pick(["PASS", "BET", "bet"])}</action>`;
    default: {
      const n = 1 + rng.int(3);
      const moves = Array.from({ length: n }, () => rng.pick(["up", "down", "left", "right"]));
      return `<action>${moves.join(", ")}</action>`;
    }
  }
}

async function makeTask(name: string, opts: TaskOptions = {}): Promise<TextTask> {
  const def = await loadTask(name);
  return createTask(name, def.twoPlayer ? opts : {});
}

describe("restart", () => {
  const cases: [string, TaskOptions][] = [
    ["tictactoe", { opponent: "random", seat: "second" }],
    ["tictactoe", { opponent: "mcts:30", seat: "second" }],
    ["tictactoe", { opponent: "preferred:2", seat: "first" }],
    ["kuhn", { opponent: "random", seat: "second" }],
    ["kuhn", { opponent: "cfr-mixed:50", seat: "first" }],
    ["sokoban", {}],
    ["minesweeper", {}],
  ];
  for (const [name, opts] of cases) {
    it(`${name} ${opts.opponent ?? ""} ${opts.seat ?? ""}: returns to the identical start, opening move included`, async () => {
      for (let seed = 0; seed < 6; seed++) {
        const task = await makeTask(name, opts);
        await task.reset(Rng.seeded(seed));
        const start = [
          task.observation(),
          task.compactObservation(),
          task.anchor(),
          JSON.stringify(task.info()),
        ];
        const rng = Rng.seeded(`moves-${seed}`);
        for (let t = 0; t < 6 && !task.done; t++) await task.step(randomResponse(task, rng));
        for (let k = 0; k < 3; k++) {
          task.restart();
          assert.deepEqual(
            [task.observation(), task.compactObservation(), task.anchor(), JSON.stringify(task.info())],
            start,
          );
          assert.equal(task.done, false);
          for (let t = 0; t < 3 && !task.done; t++) await task.step(randomResponse(task, rng));
        }
      }
    });
  }

  it("the opponent's opening move is made at reset when the agent sits second", async () => {
    const ttt = new TicTacToeTask({ opponent: "random", seat: "second" });
    await ttt.reset(Rng.seeded(1));
    assert.equal((ttt.observation().match(/O/g) ?? []).length, 1);
    assert.equal((ttt.observation().match(/X/g) ?? []).length, 0);
    const kuhn = new KuhnTask({ opponent: "random", seat: "second" });
    await kuhn.reset(Rng.seeded(1));
    assert.match(kuhn.observation(), /Player 0 \(opponent\): (PASS|BET)$/);
  });

  it("with replayOpponent a random opponent answers the same moves the same way in every attempt", async () => {
    for (const replay of [true, false]) {
      let differs = false;
      for (let seed = 0; seed < 12; seed++) {
        const task = new TicTacToeTask({ opponent: "random", seat: "first", replayOpponent: replay });
        await task.reset(Rng.seeded(seed));
        const moves = ["(1, 1)", "(3, 3)", "(1, 3)", "(3, 1)"].map((m) => `<action>${m}</action>`);
        const play = async () => {
          const out: string[] = [];
          for (const m of moves) if (!task.done) out.push((await task.step(m)).observation);
          return out;
        };
        const first = await play();
        task.restart();
        const second = await play();
        if (replay) assert.deepEqual(second, first);
        else if (JSON.stringify(second) !== JSON.stringify(first)) differs = true;
      }
      if (!replay) assert.ok(differs, "without replay the random stream continues across attempts");
    }
  });
});

describe("TicTacToe steps", () => {
  it("flags an occupied cell as invalid: reward 0, not done, board unchanged", async () => {
    const task = new TicTacToeTask({ opponent: "preferred:1", seat: "second" });
    await task.reset(Rng.seeded(0));
    // preferred:1 opens in the centre
    assert.equal(task.observation(), ". . .\n. O .\n. . .");
    const r = await task.step("<action>(2, 2)</action>");
    assert.equal(r.valid, false);
    assert.equal(r.reward, 0);
    assert.equal(r.done, false);
    assert.match(r.invalidReason ?? "", /taken/);
    assert.equal(task.observation(), ". . .\n. O .\n. . .");
  });

  it("compact boards show each empty cell as its row and column digits, the agent as X", async () => {
    const task = new TicTacToeTask({ opponent: "preferred:1", seat: "second" });
    await task.reset(Rng.seeded(0));
    assert.equal(task.compactObservation(), "11 12 13\n21 O 23\n31 32 33");
    await task.step("<action>(1, 3)</action>");
    const board = task
      .compactObservation()
      .split("\n")
      .map((r) => r.split(" "));
    assert.equal(board[0][2], "X");
    assert.equal(board.flat().filter((c) => c === "O").length, 2);
    // every digit pair names its own place, and only empty cells show one
    for (let r = 0; r < 3; r++)
      for (let c = 0; c < 3; c++) {
        const cell = board[r][c];
        if (cell !== "X" && cell !== "O") assert.equal(cell, `${r + 1}${c + 1}`);
      }
    assert.doesNotMatch(task.promptText().compactRules, /[1-3][1-3]/, "the rules show no coordinate to copy");
  });

  it("shows the agent as X even when it moves second, and pays ±10 / 0 at the end", async () => {
    const rng = Rng.seeded("ttt-games");
    const seen = new Set<number>();
    for (let g = 0; g < 60; g++) {
      const task = new TicTacToeTask({ opponent: "random", seat: g % 2 === 0 ? "first" : "second" });
      await task.reset(rng.derive("game", g));
      let last: StepResult | undefined;
      while (!task.done) {
        last = await task.step(randomResponse(task, rng));
        assert.equal(last.done || last.reward === 0, true);
      }
      assert.ok(last);
      const board = task.observation();
      const lines = board.split("\n").map((l) => l.split(" "));
      const has = (m: string) =>
        [0, 1, 2].some((i) => lines[i].every((c) => c === m) || lines.every((l) => l[i] === m)) ||
        [0, 1, 2].every((i) => lines[i][i] === m) ||
        [0, 1, 2].every((i) => lines[i][2 - i] === m);
      const expected = has("X") ? 1 : has("O") ? -1 : 0;
      assert.equal(last.score, expected, board);
      assert.equal(last.reward, 10 * expected);
      assert.equal(last.won, expected === 1);
      assert.equal(last.draw, expected === 0);
      assert.deepEqual(
        { won: task.info().won, draw: task.info().draw, score: task.info().score },
        { won: expected === 1, draw: expected === 0, score: expected },
      );
      seen.add(expected);
    }
    assert.equal(seen.size, 3, "wins, losses and draws all occurred");
  });
});

describe("Kuhn steps", () => {
  it("pays 5 × chips, shows both cards at a showdown and none after a fold", async () => {
    let showdowns = 0;
    let folds = 0;
    for (let seed = 0; seed < 80; seed++) {
      const seat = seed % 2 === 0 ? "first" : "second";
      const env = new TrialEnv(new KuhnTask({ opponent: "random", seat }), { hindsight: true });
      await env.reset(Rng.seeded(seed));
      const rng = Rng.seeded(`k${seed}`);
      let r: StepResult | undefined;
      while (!env.done) r = await env.play(`<action>${rng.pick(["PASS", "BET"])}</action>`);
      assert.ok(r?.done);
      assert.equal(r.reward, 5 * r.score);
      assert.ok([1, 2].includes(Math.abs(r.score)));
      const cards = [...r.observation.matchAll(/(Jack|Queen|King)/g)].map((m) => m[1]);
      if (r.observation.includes("Showdown")) {
        showdowns++;
        assert.equal(new Set(cards).size, 2, r.observation);
        assert.equal(r.hindsightObservation, undefined);
      } else {
        folds++;
        assert.equal(new Set(cards).size, 1, r.observation);
        assert.ok(r.hindsightObservation);
        const hidden = CARD_NAMES.find((c) => !cards.includes(c) && r?.hindsightObservation?.includes(c));
        assert.ok(hidden, "the hindsight observation names the opponent's card");
        // The reflect prompt shows the hidden card only with hindsight on.
        const withHindsight = env.messages("reflect")[0].content;
        assert.ok(withHindsight.includes(`opponent's card was ${hidden}`));
        const plain = new TrialEnv(new KuhnTask({ opponent: "random", seat }), { hindsight: false });
        plain.memory.attempts.push(structuredClone(env.memory.attempts[0]));
        assert.ok(!plain.messages("reflect")[0].content.includes(`opponent's card was ${hidden}`));
      }
      const history = env.messages("reflect")[0].content;
      assert.match(history, /Step 1 - Action: (PASS|BET)/);
      assert.doesNotMatch(history, /Action: [01]\b/);
    }
    assert.ok(showdowns > 5 && folds > 5);
  });
});

/** Plays a whole trial with a scripted random agent, checking every call's messages. */
async function runTrial(
  env: TrialEnv,
  seed: number,
  attempts: number,
  onCall: (phase: "play" | "reflect", messages: ChatMessage[], response: string, tokenIds: number[]) => void,
): Promise<void> {
  const rng = Rng.seeded(`agent-${seed}`);
  const maxTurns = (await loadTask(env.task.name)).maxTurns;
  await env.reset(Rng.seeded(seed));
  for (let k = 0; k < attempts; k++) {
    if (k > 0) {
      if (env.reflectCallExpected) {
        const msgs = env.messages("reflect");
        const response = `<think>why</think><remark>plan ${k} ${rng.int(100)}</remark>`;
        const ids = Array.from({ length: 1 + rng.int(5) }, () => rng.int(1000));
        onCall("reflect", msgs, response, ids);
        env.reflect(response, ids);
      }
      env.restart();
    }
    for (let t = 0; t < maxTurns && !env.done; t++) {
      const msgs = env.messages("play");
      const response = randomResponse(env.task, rng);
      const ids = Array.from({ length: 1 + rng.int(5) }, () => rng.int(1000));
      onCall("play", msgs, response, ids);
      await env.play(response, ids);
    }
    if (env.info().won) break;
  }
}

describe("compact prompts", () => {
  for (const name of TASK_NAMES) {
    it(`${name}: every call extends the previous call's messages plus its response (within an attempt; across attempts in the history modes)`, async () => {
      let calls = 0;
      let reflects = 0;
      let restarts = 0;
      for (const reflectionType of REFLECTION_TYPES) {
        for (let seed = 0; seed < 8; seed++) {
          const env = new TrialEnv(
            await makeTask(name, { opponent: "random", seat: seed % 2 ? "second" : "first" }),
            {
              style: "compact",
              reflectionType,
            },
          );
          let prev: ChatMessage[] | null = null;
          let prevResponse: ChatMessage | null = null;
          let prevAttempt = 0;
          await runTrial(env, seed, 3, (phase, msgs, response, ids) => {
            calls++;
            if (phase === "reflect") reflects++;
            assert.equal(msgs[0].role, "system");
            assert.equal(msgs[msgs.length - 1].role, "user");
            const newAttempt = env.attemptIndex !== prevAttempt;
            prevAttempt = env.attemptIndex;
            if (newAttempt && reflectionType === "reflection_only") {
              restarts++;
              assert.equal(msgs.length, 2, "reflection_only starts each attempt with a new chat");
            } else if (prev && prevResponse) {
              assert.deepEqual(msgs.slice(0, prev.length + 1), [...prev, prevResponse]);
              assert.equal(msgs.length, prev.length + 2, "exactly one new user message per call");
            }
            prev = msgs;
            prevResponse = { role: "assistant", content: response, tokenIds: ids };
          });
          if (reflectionType === "history_only") assert.throws(() => env.messages("reflect"));
          else assert.equal(env.reflectCallExpected, true);
        }
      }
      assert.ok(calls > 50);
      assert.ok(reflects > 0);
      assert.ok(restarts > 0);
    });
  }
});

describe("full prompts", () => {
  /** TicTacToe vs a deterministic opponent; invalid moves keep the game going for many turns. */
  async function ticTacToeEnv(reflectionType: ReflectionType): Promise<TrialEnv> {
    const env = new TrialEnv(new TicTacToeTask({ opponent: "preferred:1", seat: "first" }), {
      style: "full",
      reflectionType,
    });
    await env.reset(Rng.seeded(0));
    return env;
  }

  it("attempt 1 has no past-attempt block and no current history before the first move", async () => {
    const env = await ticTacToeEnv("reflection_only");
    const [msg, ...rest] = env.messages("play");
    assert.equal(rest.length, 0);
    assert.equal(msg.role, "user");
    assert.doesNotMatch(msg.content, /earlier attempts|Step 1/);
    assert.match(msg.content, /## Initial state\n\. \. \.\n\. \. \.\n\. \. \./);
    assert.match(msg.content, /<action>/);
    await env.play("<action>(1, 1)</action>");
    assert.match(
      env.messages("play")[0].content,
      /You have already made these moves:\nStep 1 - Move: \(1, 1\)/,
    );
  });

  it("shows the last 7 turns, with observations for the last 2 in play and 7 when reflecting", async () => {
    const env = await ticTacToeEnv("reflection_only");
    for (let i = 0; i < 9; i++) await env.play("<action>(9, 9)</action>"); // invalid: off the board
    const play = env.messages("play")[0].content;
    assert.equal((play.match(/^Step \d+ - /gm) ?? []).length, 7);
    assert.doesNotMatch(play, /Step [12] - /);
    assert.match(play, /Step 9 - Move: \(9, 9\), but it is invalid/);
    assert.equal((play.match(/Observation:/g) ?? []).length, 2);
    const reflect = env.messages("reflect")[0].content;
    assert.equal((reflect.match(/^Step \d+ - /gm) ?? []).length, 7);
    assert.equal((reflect.match(/Observation:/g) ?? []).length, 7);
    assert.match(reflect, /<remark>/);
  });

  it("reflection types decide what earlier attempts contribute", async () => {
    const texts: Record<string, string> = {};
    for (const type of REFLECTION_TYPES) {
      const env = await ticTacToeEnv(type);
      await env.play("<action>(1, 2)</action>");
      await env.play("<action>(3, 2)</action>");
      env.reflect("<remark>REFLECTION-ONE</remark>");
      env.restart();
      const content = env.messages("play")[0].content;
      texts[type] = content;
      assert.match(content, /This is attempt #2\. The game starts again from the initial state above\./);
      const hasReflection = content.includes("REFLECTION-ONE");
      const hasHistory = /In attempt #1 you made these moves:\nStep 1 - Move: \(1, 2\)/.test(content);
      assert.equal(hasReflection, type !== "history_only", type);
      assert.equal(hasHistory, type !== "reflection_only", type);
      assert.match(content, /Attempt #1 was NOT successful/);
    }
    assert.equal(new Set(Object.values(texts)).size, 3);
  });

  it("the reflect prompt sees only the attempt that just ended", async () => {
    const env = await ticTacToeEnv("history_and_reflection");
    await env.play("<action>(1, 2)</action>");
    env.reflect("<remark>FIRST-REFLECTION</remark>");
    env.restart();
    await env.play("<action>(3, 3)</action>");
    const current = env.messages("play")[0].content;
    assert.match(current, /This is attempt #2\. Moves made so far in it:\nStep 1 - Move: \(3, 3\)/);
    const reflect = env.messages("reflect")[0].content;
    assert.doesNotMatch(reflect, /FIRST-REFLECTION|\(1, 2\)/);
    assert.match(reflect, /Step 1 - Move: \(3, 3\)/);
  });

  it("a missing <remark> is an invalid reflection shown as such", async () => {
    const env = await ticTacToeEnv("reflection_only");
    await env.play("<action>(1, 2)</action>");
    const r = env.reflect("<think>I should remark</think> no tag");
    assert.equal(r.valid, false);
    env.restart();
    assert.match(env.messages("play")[0].content, /no reflection was written/);
  });
});

describe("anchors and info", () => {
  it("play anchors are observation + opponent, reflection anchors 'reflection' + opponent", async () => {
    const env = new TrialEnv(new KuhnTask({ opponent: "conservative", seat: "second" }));
    await env.reset(Rng.seeded(2));
    assert.ok(env.anchor("play").startsWith(env.task.observation()));
    assert.ok(env.anchor("play").includes("conservative"));
    assert.ok(env.anchor("reflect").startsWith("reflection"));
    assert.ok(env.anchor("reflect").includes("conservative"));
    const other = new TrialEnv(new KuhnTask({ opponent: "aggressive", seat: "second" }));
    await other.reset(Rng.seeded(2));
    assert.notEqual(other.anchor("reflect"), env.anchor("reflect"));
    const info = env.info();
    assert.deepEqual([info.opponent, info.seat, info.task], ["conservative", "second", "kuhn"]);
    const puzzle = new TrialEnv(await createTask("sokoban"));
    await puzzle.reset(Rng.seeded(2));
    assert.equal(puzzle.anchor("play"), puzzle.task.observation());
    assert.equal(puzzle.anchor("reflect"), "reflection");
    assert.deepEqual([puzzle.info().opponent, puzzle.info().seat], [null, null]);
  });

  it("memory is plain JSON and play() after the end is refused", async () => {
    const env = new TrialEnv(new KuhnTask({ opponent: "always-pass", seat: "first" }));
    await env.reset(Rng.seeded(4));
    await env.play("<action>BET</action>", [1, 2, 3]); // always-pass folds
    assert.equal(env.done, true);
    assert.deepEqual(JSON.parse(JSON.stringify(env.memory)), env.memory);
    assert.deepEqual(env.memory.attempts[0].turns[0].tokenIds, [1, 2, 3]);
    await assert.rejects(env.play("<action>BET</action>"));
  });

  it("the registry has each task's max turns", async () => {
    const turns = Object.fromEntries(
      await Promise.all(TASK_NAMES.map(async (n) => [n, (await loadTask(n)).maxTurns])),
    );
    assert.deepEqual(turns, { tictactoe: 8, kuhn: 6, sokoban: 7, minesweeper: 7 });
  });
});
