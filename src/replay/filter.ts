import type { TrialRecord } from "./read.js";
import { outcomeWord } from "./render.js";

/** The outcomes a trial's last attempt can have, as `mage replay --outcome` and the dashboard name them. */
export const OUTCOMES = ["won", "lost", "draw", "cut-off"] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** A selection of logged trials; every field left out matches all. */
export interface TrialFilter {
  iteration?: number;
  trialId?: number;
  line?: number;
  opponent?: string;
  seat?: string;
  /** Matches the trial's last attempt. */
  outcome?: Outcome;
}

export function isOutcome(s: string): s is Outcome {
  return (OUTCOMES as readonly string[]).includes(s);
}

/** The outcome of a trial's last attempt ("cut-off" for one stopped at the turn limit). */
export function trialOutcome(r: TrialRecord): Outcome | undefined {
  const last = r.attempts[r.attempts.length - 1];
  return last === undefined ? undefined : (outcomeWord(last).replace(" ", "-") as Outcome);
}

export function matchesTrial(r: TrialRecord, f: TrialFilter): boolean {
  return (
    (f.iteration === undefined || r.iteration === f.iteration) &&
    (f.trialId === undefined || r.trialId === f.trialId) &&
    (f.line === undefined || r.line === f.line) &&
    (f.opponent === undefined || r.opponent === f.opponent) &&
    (f.seat === undefined || r.seat === f.seat) &&
    (f.outcome === undefined || trialOutcome(r) === f.outcome)
  );
}

/** Whether the filter selects anything narrower than the whole log. */
export function isSelecting(f: TrialFilter): boolean {
  return Object.values(f).some((v) => v !== undefined);
}
