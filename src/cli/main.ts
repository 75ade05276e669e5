#!/usr/bin/env node
import { ExternalFailure, UsageError } from "../core/errors.js";
import { COMMANDS } from "./commands/index.js";
import { commandHelp, mainHelp } from "./help.js";

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(mainHelp());
    return name === undefined ? 2 : 0;
  }
  const entry = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!entry) {
    console.error(
      `mage: unknown command "${name}"; valid commands: ${Object.keys(COMMANDS).sort().join(", ")}`,
    );
    return 2;
  }
  const command = await entry.load();
  if (rest.includes("--help") || rest.includes("-h")) {
    console.log(commandHelp(name, command));
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`mage ${name}: ${err.message}`);
      return err.exitCode;
    }
    // The learner worker's and environment servers' failures say what happened and what to do; a
    // stack trace adds nothing.
    if (err instanceof ExternalFailure) {
      console.error(`mage ${name}: ${err.message}`);
      return 1;
    }
    throw err;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exitCode = 1;
  },
);
