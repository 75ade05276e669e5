import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, extname, join, relative, resolve, sep } from "node:path";
import { writeFileAtomic } from "../../core/atomic-write.js";
import { UsageError } from "../../core/errors.js";
import { isExperimentsFolder, loadExperiments } from "../../report/experiments.js";
import { loadSummaries } from "../../report/load.js";
import { buildReport, type Report } from "../../report/markdown.js";
import { buildResults } from "../../report/results.js";
import { parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE =
  "mage report DIR... [--out FILE.md] [--plots-dir DIR] [--title T] [--smooth N] [--results | --runs]\n" +
  "  Markdown report with SVG plots, rebuilt from run summaries alone. Each DIR is a run directory\n" +
  "  (holding summary.json), a directory of summary files (*.json, searched recursively), or a summary file.\n" +
  "  Results mode (one DIR, an experiments folder: DIR/<experiment>/<method>-s<seed>.json, experiment.json,\n" +
  "  diversity/*.json): the results document of an experiment grid: reproduce commands, targets met or\n" +
  "  missed, methods per cell with paired hierarchical-bootstrap intervals over seeds and trials, paired\n" +
  "  differences, ablations, test-time scaling, diversity, runs, plots. Chosen automatically when DIR holds\n" +
  "  an experiment.json (in it or one folder down); --results forces it, --runs forces the plain report.\n" +
  "  Example: mage report docs/results/experiments --out docs/results.md\n" +
  "  --out FILE.md     where the markdown goes (default: report.md in the first DIR; results mode: results.md)\n" +
  "  --plots-dir DIR   where the SVG files go (default: plots/ beside the markdown; results mode:\n" +
  "                    NAME-plots/ beside NAME.md)\n" +
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

/** Writes a built report: the SVGs into `plotsDir`, then the markdown, each atomically. */
async function writeFiles(
  report: Report,
  outPath: string,
  plotsDir: string,
): Promise<{ markdownPath: string; plotPaths: string[] }> {
  try {
    mkdirSync(dirname(outPath), { recursive: true });
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
  return { markdownPath: outPath, plotPaths };
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
  return { ...(await writeFiles(report, outPath, plotsDir)), notes };
}

/** The exact Kuhn calibration document (docs/results/kuhn-calibration.md) near `from`, if any. */
function findCalibration(from: string): string | undefined {
  let dir = resolve(from);
  for (let i = 0; i < 6; i++) {
    for (const p of [join(dir, "kuhn-calibration.md"), join(dir, "docs", "results", "kuhn-calibration.md")]) {
      if (existsSync(p)) return p;
    }
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return undefined;
}

/** Results mode: the document of an experiments folder (markdown and SVGs, each atomically). */
export async function writeResults(
  input: string,
  opts: {
    out?: string;
    plotsDir?: string;
    title?: string;
    smooth?: number;
    /** The command line to print under "Reproduce" (default: rebuilt from the arguments). */
    command?: string;
    resamples?: number;
  } = {},
): Promise<ReportFiles> {
  const { experiments, notes } = loadExperiments(input);
  const outPath = resolve(opts.out ?? join(input, "results.md"));
  const mdDir = dirname(outPath);
  const plotsDir =
    opts.plotsDir !== undefined
      ? resolve(opts.plotsDir)
      : join(mdDir, `${basename(outPath, extname(outPath))}-plots`);
  const calibration = findCalibration(input);
  const command =
    opts.command ?? ["mage report", input, ...(opts.out !== undefined ? ["--out", opts.out] : [])].join(" ");
  const report = buildResults(experiments, {
    ...(opts.title !== undefined ? { title: opts.title } : {}),
    ...(opts.smooth !== undefined ? { smooth: opts.smooth } : {}),
    ...(opts.resamples !== undefined ? { bootstrap: { resamples: opts.resamples } } : {}),
    plotsLink: posix(relative(mdDir, plotsDir)) || ".",
    linkOf: (p) => posix(relative(mdDir, p)),
    ...(calibration ? { calibrationLink: posix(relative(mdDir, calibration)) } : {}),
    reportCommand: command,
    notes,
    ...(existsSync(join(input, "ACCOUNT.md"))
      ? { account: readFileSync(join(input, "ACCOUNT.md"), "utf8") }
      : {}),
  });
  return { ...(await writeFiles(report, outPath, plotsDir)), notes };
}

interface ReportFlags {
  out?: string;
  "plots-dir"?: string;
  title?: string;
  smooth?: string;
  results?: boolean;
  runs?: boolean;
}

export const command: Command = {
  name: "report",
  usage: USAGE,
  async run(argv: string[]): Promise<number> {
    const { values, positionals, smooth } = parseReportFlags(argv);
    const common = {
      ...(values.out !== undefined ? { out: values.out } : {}),
      ...(values["plots-dir"] !== undefined ? { plotsDir: values["plots-dir"] } : {}),
      ...(values.title !== undefined ? { title: values.title } : {}),
      ...(smooth !== undefined ? { smooth } : {}),
    };
    const resultsMode =
      values.results === true ||
      (values.runs !== true && positionals.length === 1 && isExperimentsFolder(positionals[0]));
    if (resultsMode && positionals.length !== 1) {
      throw new UsageError(
        `--results takes one experiments folder, got ${positionals.length}\nusage: ${USAGE}`,
      );
    }
    const res = resultsMode
      ? await writeResults(positionals[0], { ...common, command: ["mage report", ...argv].join(" ") })
      : await writeReport(positionals, common);
    for (const note of res.notes) console.error(`note: ${note}`);
    console.log(`wrote ${res.markdownPath} and ${res.plotPaths.length} plot(s)`);
    return 0;
  },
};

/** The flags, each checked, and `--smooth` as a number. */
function parseReportFlags(argv: string[]): {
  values: ReportFlags;
  positionals: string[];
  smooth: number | undefined;
} {
  const { values, positionals } = parseFlags(
    argv,
    {
      out: { type: "string" },
      "plots-dir": { type: "string" },
      title: { type: "string" },
      smooth: { type: "string" },
      results: { type: "boolean" },
      runs: { type: "boolean" },
    },
    USAGE,
    true,
  );
  if (positionals.length === 0) {
    throw new UsageError(`name at least one run directory or directory of summaries\nusage: ${USAGE}`);
  }
  if (values.out === "") throw new UsageError("--out needs a file name");
  if (values["plots-dir"] === "") throw new UsageError("--plots-dir needs a folder name");
  const smooth = smoothFlag(values.smooth);
  if (values.results && values.runs) throw new UsageError("--results and --runs exclude each other");
  return { values, positionals, smooth };
}

function smoothFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 1000) {
    throw new UsageError(`--smooth must be an integer in 1..1000, got "${value}"`);
  }
  return Number(value);
}
