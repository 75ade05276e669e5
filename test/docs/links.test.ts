import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { anchorsOf, deadLinks, githubSlug, projectDocs } from "./links.js";

test("every relative link and anchor in README.md and docs/*.md resolves", () => {
  const files = projectDocs(process.cwd());
  assert.ok(files.length >= 5, `found only ${files.join(", ")}`);
  const dead = files.flatMap((f) => deadLinks(f));
  assert.deepEqual(
    dead.map((d) => `${d.file}:${d.line}: ${d.target} (${d.why})`),
    [],
  );
});

test("headings get GitHub's anchors", () => {
  assert.equal(githubSlug("Experiment `kuhn-main`"), "experiment-kuhn-main");
  assert.equal(githubSlug("`model.torch` fields"), "modeltorch-fields");
  assert.equal(githubSlug("Account (hand-written)"), "account-hand-written");
  assert.equal(
    githubSlug("Training curves in TensorBoard and Weights & Biases"),
    "training-curves-in-tensorboard-and-weights--biases",
  );
  assert.equal(githubSlug("See [the guide](x.md) **now**"), "see-the-guide-now");
  const anchors = anchorsOf('# A\n## A\n```\n# not a heading\n```\n<a id="here"></a>\n');
  assert.deepEqual([...anchors].sort(), ["a", "a-1", "here"]);
});

test("a dead file, a dead anchor and a dead same-page anchor are each reported; code is not checked", () => {
  const dir = mkdtempSync(join(tmpdir(), "mage-links-"));
  mkdirSync(join(dir, "docs"));
  writeFileSync(join(dir, "docs", "guide.md"), "# Guide\n\n## Set up\n");
  const readme = join(dir, "README.md");
  const text = [
    "# Top",
    "[ok](docs/guide.md) [ok](docs/guide.md#set-up) [ok](#top) [web](https://example.com/missing)",
    "[gone](docs/missing.md)",
    "[bad anchor](docs/guide.md#setup)",
    "[bad here](#bottom)",
    "`[in code](nowhere.md)`",
    "```",
    "[in a block](nowhere.md)",
    "```",
  ].join("\n");
  writeFileSync(readme, text);
  const dead = deadLinks(readme).map((d) => `${d.line} ${d.target}`);
  assert.deepEqual(dead, ["3 docs/missing.md", "4 docs/guide.md#setup", "5 #bottom"]);
  assert.deepEqual(projectDocs(dir), [readme, join(dir, "docs", "guide.md")]);
});
