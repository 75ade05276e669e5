import { UsageError } from "../../core/errors.js";
import { countTactics, formatTactics } from "../../evaluate/tictactoe-tactics.js";
import { isOutcome, isSelecting, matchesTrial, OUTCOMES, type TrialFilter } from "../../replay/filter.js";
import {
  countAttemptOutcomes,
  countBackAndForth,
  countLosingMoveRepeats,
  formatAttemptOutcomes,
} from "../../replay/outcomes.js";
import { readTrialLog, resolveTrialLog, type TrialRecord } from "../../replay/read.js";
import { collectRemarks, formatRemarks, remarkStats, spreadEvenly } from "../../replay/remarks.js";
import { renderTrial, trialLine } from "../../replay/render.js";
import { intFlag, parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage replay RUN_DIR|FILE.jsonl… [--eval] [--iteration N] [--trial ID] [--line N] [--opponent SPEC]",
  "            [--seat first|second] [--outcome won|lost|draw|cut-off] [--limit N] [--compact] [--list]",
  "            [--tactics] [--outcomes] [--remarks]",
  "  Replays logged trials: a training run's transcripts.jsonl (sampled trials of each iteration, the",
  "  default for RUN_DIR), its eval-transcripts.jsonl (the final evaluation's first trials of each",
  "  cell, eval.transcriptsPerCell) or a `mage eval --out` file. Without a selection it lists the",
  "  trials, one line each; with one (--iteration, --trial, --line, --opponent, --seat, --outcome) it",
  "  prints the matching trials attempt by attempt: observations, answers, feedback, outcomes and",
  "  reflections (--list lists them instead). --outcome matches a trial's last attempt. --compact",
  "  shows the compact observations. --eval reads a run directory's eval-transcripts.jsonl instead.",
  "  --tactics (TicTacToe): over every matching trial, how often the agent took a one-move win and",
  "  blocked the opponent's when it could.",
  "  --outcomes: over every matching trial, how each attempt ended (won, draw, lost, cut off) and its",
  "  mean score: whether later attempts win by trying something new or by playing again; with the",
  "  trials' play logged, how many attempts after a lost one play its losing move again.",
  "  --remarks: over every matching trial, the reflections between attempts: how many were well",
  "  formed and informative (as judged when written), how often the next attempt won after an",
  "  informative remark and after any other, and --limit N of them quoted (default 20), spread",
  "  evenly. --tactics, --outcomes and --remarks take several files or run directories (a grid's",
  "  seeds) and count over all of them.",
].join("\n");

const FLAGS = {
  iteration: { type: "string" },
  trial: { type: "string" },
  line: { type: "string" },
  opponent: { type: "string" },
  seat: { type: "string" },
  outcome: { type: "string" },
  limit: { type: "string" },
  compact: { type: "boolean" },
  list: { type: "boolean" },
  tactics: { type: "boolean" },
  outcomes: { type: "boolean" },
  remarks: { type: "boolean" },
  eval: { type: "boolean" },
} as const;

type ReplayFlags = ReturnType<typeof parseFlags<typeof FLAGS>>["values"];

export const command: Command = {
  name: "replay",
  usage: USAGE,
  async run(argv) {
    const { values, positionals } = parseFlags(argv, FLAGS, USAGE, true);
    const counting = values.outcomes === true || values.tactics === true || values.remarks === true;
    if (positionals.length === 0 || (positionals.length > 1 && !counting))
      throw new UsageError(
        `give one run directory or JSONL file (several with --outcomes, --tactics or --remarks)\nusage: ${USAGE}`,
      );
    const filter = trialFilterOf(values);
    const limit = intFlag("limit", values.limit);
    if (limit === 0) throw new UsageError("--limit must be at least 1");

    const logs = positionals.map((p) => readLogNamingSkips(p, values.eval === true));
    const chosen = logs.map((log) => ({
      file: log.file,
      records: log.records.filter((r) => matchesTrial(r, filter)),
    }));
    const selected = chosen.flatMap((c) => c.records);
    const selecting = isSelecting(filter);
    if (selected.length === 0) {
      const total = logs.reduce((n, l) => n + l.records.length, 0);
      const where = logs.length === 1 ? logs[0].file : `${logs.length} files`;
      console.log(
        `no trial in ${where} matches (${total} trial(s) in ${logs.length === 1 ? "the file" : "all"})`,
      );
      return selecting ? 1 : 0;
    }
    if (values.remarks) {
      const rows = chosen.flatMap((c) => collectRemarks(c.records, c.file));
      console.log(formatRemarks(remarkStats(rows), spreadEvenly(rows, limit ?? 20), selected.length));
      return 0;
    }
    if (values.outcomes) {
      const counts = countAttemptOutcomes(selected);
      console.log(
        formatAttemptOutcomes(
          counts,
          selected.length,
          countLosingMoveRepeats(selected),
          countBackAndForth(selected),
        ),
      );
      return 0;
    }
    if (values.tactics) {
      printTactics(selected);
      return 0;
    }
    const listing = values.list === true || !selecting;
    const shown = selected.slice(0, limit ?? (listing ? 50 : 5));
    if (listing) for (const r of shown) console.log(trialLine(r));
    else console.log(shown.map((r) => renderTrial(r, { compact: values.compact === true })).join("\n\n"));
    if (selected.length > shown.length)
      console.log(`… ${selected.length - shown.length} more; --limit N shows more, or narrow the selection`);
    if (listing && !selecting) console.log(`replay one with: mage replay ${positionals[0]} --line N`);
    return 0;
  },
};

/** The selection flags as a filter, each checked. */
function trialFilterOf(values: ReplayFlags): TrialFilter {
  if (values.seat !== undefined && values.seat !== "first" && values.seat !== "second")
    throw new UsageError(`--seat must be first or second, got "${values.seat}"`);
  if (values.outcome !== undefined && !isOutcome(values.outcome))
    throw new UsageError(`--outcome must be one of ${OUTCOMES.join(", ")}, got "${values.outcome}"`);
  const iteration = intFlag("iteration", values.iteration);
  const trial = intFlag("trial", values.trial);
  const line = intFlag("line", values.line);
  return {
    ...(iteration !== undefined ? { iteration } : {}),
    ...(trial !== undefined ? { trialId: trial } : {}),
    ...(line !== undefined ? { line } : {}),
    ...(values.opponent !== undefined ? { opponent: values.opponent } : {}),
    ...(values.seat !== undefined ? { seat: values.seat } : {}),
    ...(values.outcome !== undefined && isOutcome(values.outcome) ? { outcome: values.outcome } : {}),
  };
}

/** The trial log, with its lines that are not trial records named on stderr. */
function readLogNamingSkips(path: string, evaluation: boolean): ReturnType<typeof readTrialLog> {
  const log = readTrialLog(resolveTrialLog(path, evaluation));
  if (log.skipped.length > 0) {
    const shown = log.skipped.slice(0, 5).join(", ");
    console.error(
      `mage replay: ${log.skipped.length} line(s) of ${log.file} are not trial records (line ${shown}${log.skipped.length > 5 ? ", …" : ""}); skipped`,
    );
  }
  return log;
}

function printTactics(selected: TrialRecord[]): void {
  const memories = selected.flatMap((r) => (r.memory?.task === "tictactoe" ? [r.memory] : []));
  if (memories.length === 0)
    throw new UsageError(
      "--tactics needs TicTacToe trials with their play (transcripts or `mage eval --out`)",
    );
  console.log(`${memories.length} TicTacToe trial(s): ${formatTactics(countTactics(memories))}`);
}
