import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { UsageError } from "../../core/errors.js";
import { kuhnCalibration } from "../../evaluate/kuhn-calibration.js";
import { calibrationJson, renderCalibrationMarkdown } from "../../evaluate/kuhn-calibration-text.js";
import { MAX_CFR_ITERATIONS } from "../../opponents/kuhn/cfr.js";
import { intFlag } from "../args.js";
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

/** The output text of `mage kuhn-table` (markdown, or JSON with `json`). */
export function kuhnTableText(
  opts: { json?: boolean; cfrIterations?: number; attempts?: number } = {},
): string {
  const cal = kuhnCalibration({ cfrIterations: opts.cfrIterations, attempts: opts.attempts });
  return opts.json ? `${JSON.stringify(calibrationJson(cal), null, 2)}\n` : renderCalibrationMarkdown(cal);
}

export const command: Command = {
  name: "kuhn-table",
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
      cfrIterations:
        intFlag("cfr-iterations", values["cfr-iterations"], { min: 1, max: MAX_CFR_ITERATIONS }) ?? 1000,
      attempts: intFlag("attempts", values.attempts, { min: 1, max: 20 }) ?? 3,
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
