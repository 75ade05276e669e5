import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { UsageError } from "../../core/errors.js";
import {
  calibrationJson,
  kuhnCalibration,
  renderCalibrationMarkdown,
} from "../../evaluate/kuhn-calibration.js";
import { MAX_CFR_ITERATIONS } from "../../opponents/kuhn/cfr.js";
import type { Command } from "../command.js";

const USAGE =
  "mage kuhn-table [--json] [--out FILE] [--cfr-iterations N] [--attempts K]\n" +
  "  Exact (enumerated) calibration of the Kuhn evaluation: best responses to the training and wider\n" +
  "  pools, what fixed strategies score against every evaluation opponent per seat, and the multi-attempt\n" +
  "  view (no adaptation / perfect adaptation / knowing the opponent).\n" +
  "  --json            print the tables as one JSON object instead of markdown\n" +
  "  --out FILE        write the output to FILE instead of stdout\n" +
  "  --cfr-iterations  iterations of the cfr / cfr-mixed opponents (default 1000)\n" +
  "  --attempts        attempts per trial (default 3)";

function intFlag(name: string, value: string | undefined, dflt: number, max: number): number {
  if (value === undefined) return dflt;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > max) {
    throw new UsageError(`--${name} must be an integer in 1..${max}, got "${value}"`);
  }
  return Number(value);
}

/** The output text of `mage kuhn-table` (markdown, or JSON with `json`). */
export function kuhnTableText(
  opts: { json?: boolean; cfrIterations?: number; attempts?: number } = {},
): string {
  const cal = kuhnCalibration({ cfrIterations: opts.cfrIterations, attempts: opts.attempts });
  return opts.json ? `${JSON.stringify(calibrationJson(cal), null, 2)}\n` : renderCalibrationMarkdown(cal);
}

export const command: Command = {
  name: "kuhn-table",
  summary:
    "Exact calibration tables for Kuhn poker (pool best responses, adaptation bounds), markdown or JSON",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    let values: { json?: boolean; out?: string; "cfr-iterations"?: string; attempts?: string };
    try {
      ({ values } = parseArgs({
        args: argv,
        strict: true,
        allowPositionals: false,
        options: {
          json: { type: "boolean" },
          out: { type: "string" },
          "cfr-iterations": { type: "string" },
          attempts: { type: "string" },
        },
      }));
    } catch (err) {
      throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
    }
    const text = kuhnTableText({
      json: values.json,
      cfrIterations: intFlag("cfr-iterations", values["cfr-iterations"], 1000, MAX_CFR_ITERATIONS),
      attempts: intFlag("attempts", values.attempts, 3, 20),
    });
    if (values.out !== undefined) {
      if (values.out === "") throw new UsageError("--out needs a file name");
      writeFileSync(values.out, text);
      console.log(`wrote ${values.out}`);
    } else {
      process.stdout.write(text);
    }
    return 0;
  },
};
