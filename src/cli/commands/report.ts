import { mkdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { parseArgs } from "node:util";
import { writeFileAtomic } from "../../core/atomic-write.js";
import { UsageError } from "../../core/errors.js";
import { loadSummaries } from "../../report/load.js";
import { buildReport } from "../../report/markdown.js";
import type { Command } from "../command.js";

const USAGE =
  "mage report DIR... [--out FILE.md] [--plots-dir DIR] [--title T] [--smooth N]\n" +
  "  Markdown report with SVG plots, rebuilt from run summaries alone. Each DIR is a run directory\n" +
  "  (holding summary.json), a directory of summary files (*.json, searched recursively), or a summary file.\n" +
  "  --out FILE.md     where the markdown goes (default: report.md in the first DIR)\n" +
  "  --plots-dir DIR   where the SVG files go (default: plots/ beside the markdown)\n" +
  "  --title T         the report's title (default: mage report)\n" +
  "  --smooth N        moving-average window for training curves, in iterations (default: automatic)";

function posix(p: string): string {
  return p.split(sep).join("/");
}

export interface ReportFiles {
  markdownPath: string;
  plotPaths: string[];
  notes: string[];
}

/** Loads the summaries, builds the report and writes it (markdown and SVGs, each atomically). */
export async function writeReport(
  inputs: readonly string[],
  opts: { out?: string; plotsDir?: string; title?: string; smooth?: number } = {},
): Promise<ReportFiles> {
  const { runs, notes } = loadSummaries(inputs);
  let outPath: string;
  if (opts.out !== undefined) {
    outPath = resolve(opts.out);
  } else {
    const first = resolve(inputs[0]);
    outPath = join(statSync(first).isDirectory() ? first : dirname(first), "report.md");
  }
  const mdDir = dirname(outPath);
  const plotsDir = opts.plotsDir !== undefined ? resolve(opts.plotsDir) : join(mdDir, "plots");
  const report = buildReport(runs, {
    ...(opts.title !== undefined ? { title: opts.title } : {}),
    ...(opts.smooth !== undefined ? { smooth: opts.smooth } : {}),
    plotsLink: posix(relative(mdDir, plotsDir)) || ".",
    linkOf: (p) => posix(relative(mdDir, p)),
  });
  try {
    mkdirSync(mdDir, { recursive: true });
    mkdirSync(plotsDir, { recursive: true });
  } catch (err) {
    throw new UsageError(`cannot create the output folder: ${(err as Error).message}`);
  }
  const plotPaths: string[] = [];
  for (const p of report.plots) {
    const path = join(plotsDir, p.file);
    await writeFileAtomic(path, p.svg);
    plotPaths.push(path);
  }
  await writeFileAtomic(outPath, report.markdown);
  return { markdownPath: outPath, plotPaths, notes };
}

export const command: Command = {
  name: "report",
  summary: "Markdown report with SVG plots (runs table, final evaluation, curves) from run summaries",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    let values: { out?: string; "plots-dir"?: string; title?: string; smooth?: string };
    let positionals: string[];
    try {
      ({ values, positionals } = parseArgs({
        args: argv,
        strict: true,
        allowPositionals: true,
        options: {
          out: { type: "string" },
          "plots-dir": { type: "string" },
          title: { type: "string" },
          smooth: { type: "string" },
        },
      }));
    } catch (err) {
      throw new UsageError(`${err instanceof Error ? err.message : String(err)}\nusage: ${USAGE}`);
    }
    if (positionals.length === 0) {
      throw new UsageError(`name at least one run directory or directory of summaries\nusage: ${USAGE}`);
    }
    if (values.out === "") throw new UsageError("--out needs a file name");
    if (values["plots-dir"] === "") throw new UsageError("--plots-dir needs a folder name");
    let smooth: number | undefined;
    if (values.smooth !== undefined) {
      if (!/^\d+$/.test(values.smooth) || Number(values.smooth) < 1 || Number(values.smooth) > 1000) {
        throw new UsageError(`--smooth must be an integer in 1..1000, got "${values.smooth}"`);
      }
      smooth = Number(values.smooth);
    }
    const res = await writeReport(positionals, {
      ...(values.out !== undefined ? { out: values.out } : {}),
      ...(values["plots-dir"] !== undefined ? { plotsDir: values["plots-dir"] } : {}),
      ...(values.title !== undefined ? { title: values.title } : {}),
      ...(smooth !== undefined ? { smooth } : {}),
    });
    for (const note of res.notes) console.error(`note: ${note}`);
    console.log(`wrote ${res.markdownPath} and ${res.plotPaths.length} plot(s)`);
    return 0;
  },
};
