import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { COMMANDS, GROUPS } from "../../src/cli/commands/index.js";
import { commandHelp, mainHelp } from "../../src/cli/help.js";

test("mage --help lists every command once, one line each, under its group in order", () => {
  const lines = mainHelp().split("\n");
  const headings = lines.filter((l) => /^[a-z]+:$/.test(l)).map((l) => l.slice(0, -1));
  assert.deepEqual(headings, [...GROUPS]);
  const listed = lines.filter((l) => l.startsWith("  ")).map((l) => l.trim().split(/\s+/)[0]);
  assert.deepEqual([...listed].sort(), Object.keys(COMMANDS).sort());
  for (const line of lines) assert.ok(line.length <= 100, `over 100 characters: ${line}`);
  for (const [name, entry] of Object.entries(COMMANDS)) {
    const at = lines.findIndex((l) => l.trimStart().startsWith(`${name} `));
    const heading = lines
      .slice(0, at)
      .filter((l) => /^[a-z]+:$/.test(l))
      .at(-1);
    assert.equal(heading, `${entry.group}:`, name);
    assert.ok(lines[at].endsWith(entry.summary), name);
  }
});

test("each command's --help opens with its group and line, then its usage", async () => {
  for (const [name, entry] of Object.entries(COMMANDS)) {
    const command = await entry.load();
    assert.equal(command.name, name);
    const help = commandHelp(name, command).split("\n");
    assert.equal(help[0], `mage ${name} (${entry.group}): ${entry.summary}`);
    assert.ok(help[2].startsWith(`usage: mage ${name}`), `${name}: ${help[2]}`);
  }
});

test("docs/cli.md groups the commands as mage --help does", () => {
  const doc = readFileSync("docs/cli.md", "utf8");
  for (const group of GROUPS) {
    const title = group[0].toUpperCase() + group.slice(1);
    const section = doc.split(`\n## ${title}\n`)[1]?.split("\n## ")[0];
    assert.ok(section !== undefined, `docs/cli.md has a "${title}" section`);
    const documented = [...section.matchAll(/^\| `mage ([a-z-]+)/gm)].map((m) => m[1]);
    const expected = Object.keys(COMMANDS).filter((n) => COMMANDS[n].group === group);
    assert.deepEqual([...new Set(documented)].sort(), expected.sort(), title);
  }
});
