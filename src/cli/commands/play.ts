/**
 * `mage play`: a person plays a text task in the terminal, seeing the observation text an
 * agent sees (and, with --show-prompt, the whole prompt). Each input line is one turn: either
 * a full response with `<action>…</action>` or just the action (`(2, 3)`, `bet`, `up, left`;
 * Sokoban also takes `u l` or `ul` for people, never for agents).
 * Several attempts replay the identical start, as in a trial; `quit` or end of input stops.
 */
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { parseArgs } from "node:util";
import { expectChoice, UsageError } from "../../core/errors.js";
import { Rng } from "../../core/rng.js";
import { TrialEnv } from "../../tasks/env.js";
import { DIRECTIONS } from "../../tasks/parse.js";
import { createTask, loadTask, TASKS, type TaskDefinition } from "../../tasks/registry.js";
import {
  PROMPT_STYLES,
  type PromptStyle,
  SEATS,
  type Seat,
  type TaskOptions,
  type TextTask,
} from "../../tasks/types.js";
import { parseKnobsArg, taskKnobOptions } from "../../train/config.js";
import { intFlag } from "../args.js";
import type { Command } from "../command.js";

const USAGE =
  "mage play --game tictactoe|kuhn|sokoban|minesweeper [--opponent SPEC] [--seed S] [--seat first|second] " +
  "[--attempts N] [--style full|compact] [--show-prompt] [--knobs YAML]\n" +
  "  --style: the prompt style whose board text is shown (the presets train with compact)\n" +
  '  --knobs: puzzle difficulty, e.g. "roomSize: [7, 7], boxes: 3" (sokoban) or "mines: 5" (minesweeper); TicTacToe "cells: digits"';

export interface PlayIo {
  input: Readable;
  output: Writable;
}

export interface PlaySummary {
  game: string;
  seed: number;
  attempts: { won: boolean; score: number; reward: number; turns: number }[];
}

/** What `mage play` was asked for, checked. */
interface PlayOptions {
  game: string;
  def: TaskDefinition;
  seat: Seat | undefined;
  style: PromptStyle;
  seed: number;
  attempts: number;
  opponent: string | undefined;
  showPrompt: boolean;
  knobs: TaskOptions;
}

async function playOptions(argv: string[]): Promise<PlayOptions> {
  let values: {
    game?: string;
    opponent?: string;
    seed?: string;
    seat?: string;
    attempts?: string;
    style?: string;
    "show-prompt"?: boolean;
    knobs?: string;
  };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        game: { type: "string" },
        opponent: { type: "string" },
        seed: { type: "string" },
        seat: { type: "string" },
        attempts: { type: "string" },
        style: { type: "string" },
        "show-prompt": { type: "boolean", default: false },
        knobs: { type: "string" },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
  }
  const names = Object.keys(TASKS);
  if (values.game === undefined)
    throw new UsageError(`--game is required; valid choices: ${names.join(", ")}`);
  const game = expectChoice("game", values.game, names);
  const def = await loadTask(game);
  const seat = values.seat === undefined ? undefined : expectChoice<Seat>("seat", values.seat, SEATS);
  const style =
    values.style === undefined ? "full" : expectChoice<PromptStyle>("style", values.style, PROMPT_STYLES);
  const seed = intFlag("seed", values.seed) ?? Date.now() % 0x7fffffff;
  const attempts = intFlag("attempts", values.attempts, { min: 1 }) ?? 3;
  if (!def.twoPlayer && values.opponent !== undefined) {
    throw new UsageError(`--opponent: ${game} is a single-player puzzle and has no opponent`);
  }
  if (!def.twoPlayer && seat !== undefined) throw new UsageError(`--seat: ${game} is a single-player puzzle`);
  const knobs = values.knobs !== undefined ? taskKnobOptions(game, parseKnobsArg(game, values.knobs)) : {};
  return {
    game,
    def,
    seat,
    style,
    seed,
    attempts,
    opponent: values.opponent,
    showPrompt: values["show-prompt"] ?? false,
    knobs,
  };
}

/** Lines to the player, and their answers one line at a time (null at the end of input). */
interface Terminal {
  out(s?: string): void;
  ask(q: string): Promise<string | null>;
  close(): void;
}

function terminal(io: PlayIo): Terminal {
  const rl = createInterface({ input: io.input, terminal: false });
  const lines = rl[Symbol.asyncIterator]();
  return {
    out: (s = "") => io.output.write(`${s}\n`),
    async ask(q) {
      io.output.write(q);
      const r = await lines.next();
      if (r.done) return null;
      return r.value.trim();
    },
    close: () => rl.close(),
  };
}

/** One game being played: the task, its trial environment and the board text the agent sees. */
interface Table {
  o: PlayOptions;
  task: TextTask;
  env: TrialEnv;
  term: Terminal;
  board(): string;
}

/** Runs `mage play` with the given arguments and streams; returns what was played. */
export async function runPlay(argv: string[], io: PlayIo): Promise<PlaySummary> {
  const o = await playOptions(argv);
  const task = await createTask(
    o.game,
    o.def.twoPlayer ? { ...o.knobs, opponent: o.opponent, seat: o.seat } : o.knobs,
  );
  const t: Table = {
    o,
    task,
    env: new TrialEnv(task, { style: o.style, reflectionType: "history_and_reflection" }),
    term: terminal(io),
    // The board text the agent sees in this prompt style.
    board: () => (o.style === "compact" ? task.compactObservation() : task.observation()),
  };
  const summary: PlaySummary = { game: o.game, seed: o.seed, attempts: [] };
  try {
    await t.env.reset(Rng.seeded(o.seed));
    introduce(t);
    let quit = false;
    for (let k = 0; k < o.attempts && !quit; k++) {
      if (k > 0) {
        await t.env.restart();
        t.term.out();
        t.term.out(`=== Attempt ${k + 1} of ${o.attempts}: the same start again ===`);
      }
      const played = await playTurns(t);
      quit = played.quit;
      if (quit && played.turns === 0) break;
      const attempt = endAttempt(t, k, played);
      summary.attempts.push(attempt);
      if (attempt.won) {
        t.term.out("Solved/won: a trial stops here.");
        break;
      }
      if (k + 1 < o.attempts && !quit && t.env.reflectCallExpected) quit = await askReflection(t);
    }
  } finally {
    t.term.close();
  }
  return summary;
}

function introduce({ o, task, term }: Table): void {
  const who = task.opponent ? ` against ${task.opponent}, you move ${task.seat}` : "";
  term.out(`${o.game}${who} (seed ${o.seed}; replay with --seed ${o.seed}).`);
  term.out(
    `Up to ${o.def.maxTurns} turns per attempt, ${o.attempts} attempt${o.attempts === 1 ? "" : "s"}. Type "quit" to stop.`,
  );
  term.out();
  // The rules of the prompt style whose board is shown (compact boards carry no row numbers).
  term.out(o.style === "compact" ? task.promptText().compactRules : task.promptText().rules);
  if (o.game === "sokoban") term.out('(Here you may type letters too: "u l" or "ul" is up, left.)');
}

/** The turns of one attempt, until it ends, runs out of turns or the player quits. */
async function playTurns(t: Table): Promise<{ reward: number; turns: number; quit: boolean }> {
  const { o, env, term } = t;
  let reward = 0;
  let turns = 0;
  while (turns < o.def.maxTurns && !env.done) {
    term.out();
    if (o.showPrompt) {
      for (const m of env.messages("play")) term.out(`[${m.role}]\n${m.content}\n`);
    } else {
      term.out(t.board());
    }
    const line = await term.ask(`Turn ${turns + 1}/${o.def.maxTurns} > `);
    if (line === null || line.toLowerCase() === "quit") return { reward, turns, quit: true };
    if (line === "") {
      term.out("(empty line ignored)");
      continue;
    }
    const response = /<action>/i.test(line) ? line : `<action>${humanShorthand(o.game, line)}</action>`;
    const r = await env.play(response);
    turns++;
    reward += r.reward;
    if (!r.valid) term.out(`Invalid (turn used): ${r.invalidReason}. Reward ${fmt(r.reward)}.`);
    else term.out(`${r.action}: ${r.feedback}. Reward ${fmt(r.reward)}.`);
  }
  return { reward, turns, quit: false };
}

/** Shows how attempt `k` ended; returns it for the summary. */
function endAttempt(
  t: Table,
  k: number,
  played: { reward: number; turns: number; quit: boolean },
): PlaySummary["attempts"][number] {
  const { env, term } = t;
  const last = env.currentAttempt.turns[env.currentAttempt.turns.length - 1];
  const info = env.info();
  term.out();
  term.out(t.board());
  if (env.done) term.out(last?.outcome ?? (info.won ? "You won." : "Game over."));
  else if (!played.quit) term.out("Out of turns.");
  term.out(`Attempt ${k + 1}: total reward ${fmt(played.reward)}, score ${fmt(info.score)}.`);
  return { won: info.won, score: info.score, reward: played.reward, turns: played.turns };
}

/** Asks for the player's reflection before the next attempt; true when they quit instead. */
async function askReflection({ env, term }: Table): Promise<boolean> {
  const note = await term.ask("Reflection for your next attempt (Enter to skip) > ");
  if (note === null || note.toLowerCase() === "quit") return true;
  env.reflect(`<remark>${note}</remark>`);
  return false;
}

/**
 * Sokoban moves typed as letters (`u l`, `u,l` or `ul`) spelled out for the agent's parser, so a
 * person need not type `up, left`. Anything else (words, other games) passes through unchanged.
 */
export function humanShorthand(game: string, line: string): string {
  if (game !== "sokoban") return line;
  const letters = line.toLowerCase().replace(/[\s,]+/g, "");
  if (letters.length === 0 || !/^[udlr]+$/.test(letters)) return line;
  return [...letters].map((c) => DIRECTIONS.find((d) => d[0] === c)).join(", ");
}

function fmt(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(2).replace(/0$/, "");
}

export const command: Command = {
  name: "play",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    await runPlay(argv, { input: process.stdin, output: process.stdout });
    return 0;
  },
};
