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
import { createTask, loadTask, TASKS } from "../../tasks/registry.js";
import { PROMPT_STYLES, type PromptStyle, SEATS, type Seat } from "../../tasks/types.js";
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

/** Runs `mage play` with the given arguments and streams; returns what was played. */
export async function runPlay(argv: string[], io: PlayIo): Promise<PlaySummary> {
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
  const task = await createTask(game, def.twoPlayer ? { ...knobs, opponent: values.opponent, seat } : knobs);
  // The board text the agent sees in this prompt style.
  const board = () => (style === "compact" ? task.compactObservation() : task.observation());
  const env = new TrialEnv(task, { style, reflectionType: "history_and_reflection" });

  const out = (s = "") => io.output.write(`${s}\n`);
  const rl = createInterface({ input: io.input, terminal: false });
  const lines = rl[Symbol.asyncIterator]();
  const ask = async (q: string): Promise<string | null> => {
    io.output.write(q);
    const r = await lines.next();
    if (r.done) return null;
    return r.value.trim();
  };

  const summary: PlaySummary = { game, seed, attempts: [] };
  try {
    await env.reset(Rng.seeded(seed));
    const who = task.opponent ? ` against ${task.opponent}, you move ${task.seat}` : "";
    out(`${game}${who} (seed ${seed}; replay with --seed ${seed}).`);
    out(
      `Up to ${def.maxTurns} turns per attempt, ${attempts} attempt${attempts === 1 ? "" : "s"}. Type "quit" to stop.`,
    );
    out();
    // The rules of the prompt style whose board is shown (compact boards carry no row numbers).
    out(style === "compact" ? task.promptText().compactRules : task.promptText().rules);
    if (game === "sokoban") out('(Here you may type letters too: "u l" or "ul" is up, left.)');
    let quit = false;
    for (let k = 0; k < attempts && !quit; k++) {
      if (k > 0) {
        await env.restart();
        out();
        out(`=== Attempt ${k + 1} of ${attempts}: the same start again ===`);
      }
      let reward = 0;
      let turn = 0;
      while (turn < def.maxTurns && !env.done) {
        out();
        if (values["show-prompt"]) {
          for (const m of env.messages("play")) out(`[${m.role}]\n${m.content}\n`);
        } else {
          out(board());
        }
        const line = await ask(`Turn ${turn + 1}/${def.maxTurns} > `);
        if (line === null || line.toLowerCase() === "quit") {
          quit = true;
          break;
        }
        if (line === "") {
          out("(empty line ignored)");
          continue;
        }
        const response = /<action>/i.test(line) ? line : `<action>${humanShorthand(game, line)}</action>`;
        const r = await env.play(response);
        turn++;
        reward += r.reward;
        if (!r.valid) out(`Invalid (turn used): ${r.invalidReason}. Reward ${fmt(r.reward)}.`);
        else out(`${r.action}: ${r.feedback}. Reward ${fmt(r.reward)}.`);
      }
      if (quit && turn === 0) break;
      const last = env.currentAttempt.turns[env.currentAttempt.turns.length - 1];
      const info = env.info();
      out();
      out(board());
      if (env.done) out(last?.outcome ?? (info.won ? "You won." : "Game over."));
      else if (!quit) out("Out of turns.");
      out(`Attempt ${k + 1}: total reward ${fmt(reward)}, score ${fmt(info.score)}.`);
      summary.attempts.push({ won: info.won, score: info.score, reward, turns: turn });
      if (info.won) {
        out("Solved/won: a trial stops here.");
        break;
      }
      if (k + 1 < attempts && !quit && env.reflectCallExpected) {
        const note = await ask("Reflection for your next attempt (Enter to skip) > ");
        if (note === null || note.toLowerCase() === "quit") quit = true;
        else env.reflect(`<remark>${note}</remark>`);
      }
    }
  } finally {
    rl.close();
  }
  return summary;
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
  summary: "play a text task yourself in the terminal (the observations an agent sees)",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    await runPlay(argv, { input: process.stdin, output: process.stdout });
    return 0;
  },
};
