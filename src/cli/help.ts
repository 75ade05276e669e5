import type { Command } from "./command.js";
import { COMMANDS, GROUPS } from "./commands/index.js";

/** `mage --help`: every command, one line each, in its group. */
export function mainHelp(): string {
  const names = Object.keys(COMMANDS);
  const width = Math.max(...names.map((n) => n.length)) + 2;
  const lines = [
    "mage: meta-reinforcement learning for language agents",
    "",
    "usage: mage <command> [options]    (mage <command> --help for its options)",
  ];
  for (const group of GROUPS) {
    lines.push("", `${group}:`);
    for (const name of names.filter((n) => COMMANDS[n].group === group)) {
      lines.push(`  ${name.padEnd(width)}${COMMANDS[name].summary}`);
    }
  }
  return lines.join("\n");
}

/** `mage NAME --help`: its line from `mage --help`, then its usage. */
export function commandHelp(name: string, command: Command): string {
  const entry = COMMANDS[name];
  return `mage ${name} (${entry.group}): ${entry.summary}\n\nusage: ${command.usage}`;
}
