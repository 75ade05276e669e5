import type { AttemptSummary } from "../rollout/types.js";
import type { AttemptRecord, TurnRecord } from "../tasks/memory.js";
import type { TrialRecord } from "./read.js";

/**
 * Plain-text replay of logged trials: what the agent saw, answered and was told, attempt by
 * attempt, with the reflections between attempts. `compact` shows the compact observations (what
 * a model with compact prompts reads) instead of the full ones.
 */
export interface RenderOptions {
  compact?: boolean;
}

export function outcomeWord(a: AttemptSummary): string {
  if (!a.finished) return "cut off";
  return a.won ? "won" : a.draw ? "draw" : "lost";
}

function signed(x: number): string {
  return x > 0 ? `+${x}` : String(x);
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function opponentOf(r: TrialRecord): string {
  const parts: string[] = [];
  // Puzzles have neither (older files write "none").
  if (r.opponent && r.opponent !== "none") parts.push(`vs ${r.opponent}`);
  if (r.seat && r.seat !== "none") parts.push(`agent ${r.seat}`);
  return parts.join(", ");
}

/** One line per trial: where it is in the file, against whom, and each attempt's result. */
export function trialLine(r: TrialRecord): string {
  const where = [r.iteration !== undefined ? `iteration ${r.iteration}` : null, `trial ${r.trialId}`]
    .filter((x) => x !== null)
    .join(" ");
  const results = r.attempts.map((a) => `${outcomeWord(a)} ${signed(a.score)}`).join(", ");
  const flags = [r.aborted ? "aborted" : null, r.stopReason ? `stopped: ${r.stopReason}` : null].filter(
    (x) => x !== null,
  );
  const who = opponentOf(r);
  return `line ${r.line}: ${where}${who ? `, ${who}` : ""}: ${results || "no attempt"}${flags.length > 0 ? ` (${flags.join("; ")})` : ""}`;
}

function indent(text: string, prefix: string): string[] {
  return text.split("\n").map((l) => `${prefix}${l}`);
}

function turnLines(t: TurnRecord, n: number, o: RenderOptions): string[] {
  const lead = `  ${n}. > `;
  const pad = " ".repeat(lead.length);
  const response = t.response === "" ? "(empty answer)" : t.response;
  const out = response.split("\n").map((l, i) => `${i === 0 ? lead : pad}${l}`);
  if (!t.valid) {
    out.push(`${pad}invalid: ${t.invalidReason ?? (t.feedback || "no legal action")}`);
    return out;
  }
  out.push(`${pad}${t.action}${t.feedback ? ` — ${t.feedback}` : ""}`);
  const obs = o.compact ? t.compactObservation : t.observation;
  if (obs?.includes("\n")) out.push(...indent(obs, pad));
  return out;
}

function attemptLines(a: AttemptRecord, outcome: AttemptSummary | undefined, o: RenderOptions): string[] {
  const head = outcome
    ? `attempt ${a.index + 1}: ${outcomeWord(outcome)}, score ${signed(outcome.score)}, reward ${signed(outcome.reward)}, ` +
      `${plural(outcome.turns, "turn")}${outcome.invalidActions > 0 ? `, ${outcome.invalidActions} invalid` : ""}`
    : `attempt ${a.index + 1} (in progress when logged)`;
  const out = [`── ${head} ──`];
  out.push(...indent(o.compact ? a.compactInitialObservation : a.initialObservation, "  "));
  a.turns.forEach((t, i) => {
    out.push(...turnLines(t, i + 1, o));
  });
  const last = a.turns[a.turns.length - 1];
  const ending = o.compact ? last?.compactOutcome : last?.outcome;
  if (ending) out.push(`  outcome: ${ending}`);
  if (a.reflection) {
    out.push(
      a.reflection.valid
        ? `  reflection: ${a.reflection.text}`
        : `  reflection (invalid, not kept): ${a.reflection.response}`,
    );
  }
  return out;
}

/** The whole trial, attempt by attempt; a record without memory shows its outcomes only. */
export function renderTrial(r: TrialRecord, o: RenderOptions = {}): string {
  const task = r.memory?.task ? `${r.memory.task} ` : "";
  const out = [`${task}${trialLine(r)}`];
  if (!r.memory) {
    out.push("  (this log keeps outcomes only; transcripts.jsonl and `mage eval --out` files keep the play)");
    return out.join("\n");
  }
  for (const a of r.memory.attempts) out.push(...attemptLines(a, r.attempts[a.index], o));
  return out.join("\n");
}
