import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../src/core/rng.js";
import type { EnvClient } from "../../src/env/client.js";
import type { EnvDescription } from "../../src/env/protocol.js";
import { parseInfoReply } from "../../src/env/protocol.js";
import { ScriptedAgent } from "../../src/policy/scripted-agent.js";
import { runTrials } from "../../src/rollout/runner.js";
import { TrialEnv } from "../../src/tasks/env.js";
import { KuhnTask } from "../../src/tasks/kuhn.js";
import { createTask, loadTask } from "../../src/tasks/registry.js";
import {
  attemptCommands,
  informativeTerms,
  judgeAttemptRemark,
  remarkInformative,
} from "../../src/tasks/remark-quality.js";
import { RemoteTask } from "../../src/tasks/remote.js";
import { TicTacToeTask } from "../../src/tasks/tictactoe.js";
import type { AttemptSeen, TaskPromptText } from "../../src/tasks/types.js";
import { unskilledBehaviour } from "../../src/train/pretrain/corpus.js";
import { stepResult } from "./step-fixture.js";

const turn = stepResult;

/** The coin collector's prompt text as the TextWorldExpress adapter writes it. */
const COIN_PROMPT: TaskPromptText = {
  rules:
    "You are playing Coin Collector, a TextWorldExpress text game. Your task is to find the coin. Then take it.\n" +
    "Explore the house room by room (open closed doors to pass through them) until you see the coin, then take it.\n" +
    "You act by choosing one of the valid actions listed with the current state, for example `look around`, `move north`, `open door to east`, `take coin`.",
  playInstruction:
    "Now it's your turn to take an action. First reason step by step about the current situation and what you have already seen; then choose one valid action and write it exactly as listed inside <action> </action>, for example <action>move north</action>.",
  compactRules:
    "Coin Collector (TextWorldExpress): Your task is to find the coin. Then take it. Explore the house room by room (open closed doors to pass through them) until you see the coin, then take it. Reply with one listed action in <action></action>, written exactly (e.g. <action>move north</action>).",
  compactAsk: "Action?",
  actionWord: "Action",
  legalActionsHeading: "Your valid actions in the current situation are:",
};

const COIN_ATTEMPT: AttemptSeen = {
  initialObservation:
    "You are in the kitchen. In one part of the room you see a stove. There is also an oven. You also see a fridge that is closed.\n" +
    "To the North you see the pantry. To the South you see a closed wood door. To the East you see the corridor.",
  compactInitialObservation:
    "You are in the kitchen.\nTo the North you see the pantry. To the South you see a closed wood door. To the East you see the corridor.\n" +
    "Actions: look around, move east, move north, open door to south.",
  initialLegalActions: ["look around", "move east", "move north", "open door to south"],
  turns: [
    turn(
      "move north",
      "You are in the pantry. In one part of the room you see a shelf.\nTo the South you see the kitchen.",
      {
        legalActions: ["look around", "move south"],
      },
    ),
    turn("move south", "You are in the kitchen. In one part of the room you see a stove.", {
      legalActions: ["look around", "move east", "move north", "open door to south"],
    }),
    turn("move east", "You are in the corridor. To the North you see a closed wooden door.", {
      legalActions: ["look around", "move west", "open door to north"],
    }),
  ],
};

const ALFWORLD_PROMPT: TaskPromptText = {
  rules:
    "You are an expert agent in the ALFRED household environment, a text game in a simulated home. Your task is to: put a clean mug in coffeemachine.\n" +
    "You act by choosing one of the admissible actions listed with the current state, for example `go to countertop 1`, `take apple 1 from countertop 1`, `open fridge 1`, `heat apple 1 with microwave 1`, `move apple 1 to diningtable 1`. You can hold one object at a time.",
  playInstruction: "Now it's your turn to take an action.",
  compactRules:
    "ALFWorld household task: put a clean mug in coffeemachine. Reply with one action in <action></action>: go to PLACE (any place in the room), examine PLACE, look, inventory, or an action listed, written exactly (e.g. <action>go to countertop 1</action>). You hold one object at a time.",
  compactAsk: "Action?",
  actionWord: "Action",
  legalActionsHeading: "Your admissible actions in the current situation are:",
};

const ALFWORLD_ATTEMPT: AttemptSeen = {
  initialObservation:
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 1, a drawer 1, a sinkbasin 1.\n\nYour task is to: put a clean mug in coffeemachine.",
  compactInitialObservation: "You are in the middle of a room.",
  initialLegalActions: ["go to cabinet 1", "go to cabinet 2", "go to drawer 1", "look", "inventory"],
  turns: [
    turn("go to cabinet 2", "You arrive at cabinet 2. The cabinet 2 is closed."),
    turn("open cabinet 2", "You open the cabinet 2. The cabinet 2 is open. In it, you see a mug 1."),
    turn("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
    turn("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see nothing."),
  ],
};

describe("served environments: the default informative rule (observed terms)", () => {
  it("TextWorldExpress coin collector remarks", () => {
    const informative = (t: string) => remarkInformative(t, COIN_ATTEMPT, COIN_PROMPT);
    assert.equal(
      informative("The coin was not in the kitchen or the pantry; the corridor's north door was not opened."),
      true,
    );
    assert.deepEqual(
      informativeTerms("The coin was not in the kitchen or the pantry.", COIN_ATTEMPT, COIN_PROMPT),
      ["kitchen", "pantry"],
    );
    assert.equal(informative("Failed. I found nothing useful."), false);
    assert.equal(informative("Not done, and nothing seen worth keeping."), false);
    assert.equal(informative("I should explore more rooms and find the coin."), false, "rules' words only");
    assert.equal(informative("Go south next time."), false, "a direction is no thing");
    assert.equal(informative("The backyard had the coin."), false, "never observed in this attempt");
  });

  it("judgeAttemptRemark on coin remarks: informative, valid but not informative, invalid", () => {
    const judge = (r: string) => judgeAttemptRemark(r, COIN_ATTEMPT, { prompt: COIN_PROMPT });
    assert.deepEqual(
      judge(
        "<remark>The coin was not in the kitchen or the pantry; the corridor's north door was not opened.</remark>",
      ),
      {
        valid: true,
        text: "The coin was not in the kitchen or the pantry; the corridor's north door was not opened.",
        informative: true,
      },
    );
    assert.deepEqual(judge("<remark>Failed. I found nothing useful.</remark>"), {
      valid: true,
      text: "Failed. I found nothing useful.",
      informative: false,
    });
    const tag = judge("<remark><action>move south</action></remark>");
    assert.equal(tag.valid, false);
    assert.equal(tag.failure, "markup");
    assert.equal(tag.informative, false);
    const echo = judge("<remark>move south</remark>");
    assert.equal(echo.failure, "echo", "a played command");
    assert.equal(
      judge("<remark>Open door to north.</remark>").failure,
      "echo",
      "a legal command never played",
    );
    assert.equal(
      judgeAttemptRemark("<remark>x y z</remark>", COIN_ATTEMPT).informative,
      undefined,
      "no prompt, no rule",
    );
  });

  it("ALFWorld remarks", () => {
    const informative = (t: string) => remarkInformative(t, ALFWORLD_ATTEMPT, ALFWORLD_PROMPT);
    assert.equal(informative("cabinet 3 held a mug 1; drawer 1 was empty"), true);
    assert.equal(informative("Failed. I saw: cabinet 2 held a mug 1. drawer 1 held nothing."), true);
    assert.equal(
      informative("I need to put a clean mug in the coffeemachine."),
      false,
      "the goal is the rules'",
    );
    assert.equal(informative("Failed. I found nothing useful."), false);
    assert.equal(informative("sidetable 1 held a cellphone"), false, "never seen");
  });

  it("attemptCommands: played actions and every legal action the record keeps", () => {
    const cmds = attemptCommands(COIN_ATTEMPT, ["inventory"]);
    for (const c of ["move north", "move south", "move east", "open door to north", "move west", "inventory"])
      assert.ok(cmds.includes(c), c);
  });

  it("a served task judges by its declared rule: observed terms by default, none on request", async () => {
    const env = (remarks?: EnvDescription["remarks"]): EnvDescription => ({
      name: "twx-coin",
      description: "",
      twoPlayer: false,
      seats: [],
      opponents: [],
      defaultOpponent: null,
      maxTurns: 10,
      seeds: { min: 0, max: 9 },
      config: {},
      legalActions: true,
      ...(remarks ? { remarks } : {}),
    });
    const client = {
      url: "http://fake",
      create: async () => ({
        session: "s1",
        fingerprint: "f",
        observation: COIN_ATTEMPT.initialObservation,
        compactObservation: COIN_ATTEMPT.compactInitialObservation,
        legalActions: COIN_ATTEMPT.initialLegalActions,
        toMove: "agent",
        done: false,
        prompt: COIN_PROMPT,
      }),
      close: async () => undefined,
    } as unknown as EnvClient;
    const seeds = { min: 0, max: 9 };
    const task = new RemoteTask(client, env(), {}, seeds);
    await task.reset(Rng.seeded(1));
    assert.equal(task.remarkInformative?.("The pantry was empty.", COIN_ATTEMPT), true);
    assert.equal(task.remarkInformative?.("Failed. I found nothing useful.", COIN_ATTEMPT), false);
    const ignoring = new RemoteTask(
      client,
      env({ informative: "observed-terms", ignoreWords: ["Pantry"] }),
      {},
      seeds,
    );
    await ignoring.reset(Rng.seeded(1));
    assert.equal(ignoring.remarkInformative?.("The pantry was empty.", COIN_ATTEMPT), false);
    assert.equal(
      new RemoteTask(client, env({ informative: "none" }), {}, seeds).remarkInformative,
      undefined,
    );
    assert.equal(
      new RemoteTask(client, env({ informative: "llm-judge" }), {}, seeds).remarkInformative,
      undefined,
    );
  });

  it("/info's optional remarks field is read, and an entry without it has none", () => {
    const entry = {
      name: "e",
      twoPlayer: false,
      maxTurns: 5,
      seeds: { min: 0, max: 1 },
    };
    const info = parseInfoReply({
      protocol: "mage-env/1",
      environments: [entry, { ...entry, name: "f", remarks: { informative: "none", ignoreWords: ["room"] } }],
    });
    assert.equal(info.environments[0].remarks, undefined);
    assert.deepEqual(info.environments[1].remarks, { informative: "none", ignoreWords: ["room"] });
    assert.throws(
      () =>
        parseInfoReply({
          protocol: "mage-env/1",
          environments: [{ ...entry, remarks: { ignoreWords: [] } }],
        }),
      /remarks: field "informative" must be a string/,
    );
  });
});

describe("built-in games: their informative rules, through TrialEnv", () => {
  it("Kuhn: a remark naming a card the attempt showed", async () => {
    const env = new TrialEnv(new KuhnTask({ opponent: "conservative", seat: "first" }, [2, 0]));
    await env.reset(Rng.seeded(3));
    while (!env.done) await env.play("<action>BET</action>");
    assert.equal(env.reflect("<remark>Had K and bet; opp folded.</remark>").informative, true);
    const other = new TrialEnv(new KuhnTask({ opponent: "conservative", seat: "first" }, [2, 0]));
    await other.reset(Rng.seeded(3));
    while (!other.done) await other.play("<action>BET</action>");
    assert.deepEqual(other.reflect("<remark>I should bet more often.</remark>"), {
      valid: true,
      text: "I should bet more often.",
      informative: false,
    });
  });

  it("Kuhn: a remark that is only a move is an echo, penalised as invalid", async () => {
    const env = new TrialEnv(new KuhnTask({ opponent: "conservative", seat: "first" }, [0, 2]));
    await env.reset(Rng.seeded(3));
    while (!env.done) await env.play("<action>PASS</action>");
    const r = env.reflect("<remark>BET.</remark>");
    assert.equal(r.valid, false);
    assert.equal(r.failure, "echo");
    assert.equal(r.informative, false);
    assert.equal(env.memory.attempts[0].reflection?.failure, "echo", "recorded in the trial memory");
  });

  it("TicTacToe: a remark naming a cell a move took; a legal cell alone is an echo", async () => {
    const env = new TrialEnv(new TicTacToeTask({ opponent: "preferred:1", seat: "first" }));
    await env.reset(Rng.seeded(4));
    await env.play("<action>(2, 2)</action>");
    const played = env.reflect("<remark>I took (2,2) first; it did not win.</remark>");
    assert.equal(played.valid, true);
    assert.equal(played.informative, true);
    const again = new TrialEnv(new TicTacToeTask({ opponent: "preferred:1", seat: "first" }));
    await again.reset(Rng.seeded(4));
    await again.play("<action>(2, 2)</action>");
    assert.equal(again.reflect("<remark>(3, 3)</remark>").failure, "echo", "a legal cell never played");
    const vague = new TrialEnv(new TicTacToeTask({ opponent: "preferred:1", seat: "first" }));
    await vague.reset(Rng.seeded(4));
    await vague.play("<action>(2, 2)</action>");
    assert.equal(vague.reflect("<remark>Block the opponent earlier.</remark>").informative, false);
  });

  it("MineSweeper: a remark naming a cell the attempt opened; Sokoban: not judged", async () => {
    const ms = new TrialEnv(await createTask("minesweeper"));
    await ms.reset(Rng.seeded(5));
    assert.equal((await ms.play("<action>(1, 5)</action>")).valid, true, "a closed cell of this board");
    assert.equal(ms.reflect("<remark>I opened (1, 5) first.</remark>").informative, true);
    const ms2 = new TrialEnv(await createTask("minesweeper"));
    await ms2.reset(Rng.seeded(5));
    await ms2.play("<action>(1, 5)</action>");
    assert.equal(ms2.reflect("<remark>Open corners less often.</remark>").informative, false);
    const sk = new TrialEnv(await createTask("sokoban"));
    await sk.reset(Rng.seeded(6));
    await sk.play("<action>up</action>");
    const r = sk.reflect("<remark>I moved up once; the box stayed.</remark>");
    assert.equal(r.valid, true);
    assert.equal(r.informative, undefined);
    const sk2 = new TrialEnv(await createTask("sokoban"));
    await sk2.reset(Rng.seeded(6));
    await sk2.play("<action>up, left</action>");
    assert.equal(sk2.reflect("<remark>Up, left.</remark>").failure, "echo");
  });
});

describe("the embedded warm start's template reflections", () => {
  it("are valid remarks, and informative wherever the game judges it", async () => {
    for (const game of ["kuhn", "tictactoe", "sokoban", "minesweeper"] as const) {
      const def = await loadTask(game);
      const agent = new ScriptedAgent(
        "unskilled",
        unskilledBehaviour(game, { malformedRate: 0, epsilon: 0.5 }),
      );
      const specs = Array.from({ length: 24 }, (_, i) => ({
        trialId: i,
        groupId: i,
        taskSeed: 1000 + i,
        opponent: def.twoPlayer ? (def.defaultOpponent ?? null) : null,
        seat: def.twoPlayer ? (i % 2 === 0 ? ("first" as const) : ("second" as const)) : null,
      }));
      const records = await runTrials(
        specs,
        (s) =>
          def.create(def.twoPlayer ? { opponent: s.opponent ?? undefined, seat: s.seat ?? undefined } : {}),
        agent,
        Rng.seeded(game),
        {
          attempts: 3,
          maxTurns: def.maxTurns,
          reflection: "reflection_only",
          promptStyle: "compact",
          hindsight: false,
          sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 48, stop: [] },
          maxBatch: 64,
          concurrency: 1,
        },
      );
      const reflects = records.flatMap((r) => r.rows).filter((r) => r.phase === "reflect");
      assert.ok(reflects.length > 5, `${game}: ${reflects.length} reflections`);
      for (const r of reflects) assert.equal(r.valid, true, `${game}: ${r.response} (${r.invalidReason})`);
      const informative = reflects.filter((r) => r.informative).length;
      if (game === "sokoban") assert.equal(informative, 0, "not judged");
      else
        assert.ok(
          informative >= 0.9 * reflects.length,
          `${game}: ${informative}/${reflects.length} informative`,
        );
    }
  });
});
