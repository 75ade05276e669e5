/**
 * `mage dashboard` probed as a hostile or careless client would (loopback only, bounded loops):
 * the API key (bearer header, `?key=` login and its cookie), bodies and methods it refuses,
 * stalled sockets, a flood of page requests, and SIGTERM with connections open.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type DashboardHandle, startDashboard } from "../../src/web/server.js";
import { makeSummary } from "../report/fixtures.js";
import { exchange, stalledSockets, startCli, terminate, upload } from "../serve/probes.js";

const KEY = "dash-key-31c9";
let root: string;
let dash: DashboardHandle;
let runId: string;

before(async () => {
  root = mkdtempSync(join(tmpdir(), "mage-dashboard-probes-"));
  mkdirSync(join(root, "run-a"));
  writeFileSync(
    join(root, "run-a", "summary.json"),
    JSON.stringify(makeSummary({ name: "a", withFinal: true })),
  );
  dash = await startDashboard({ roots: [root], port: 0, apiKey: KEY, cwd: root });
  runId = dash.index.scan()[0].id;
});
after(async () => {
  await dash.close();
});

const base = () => dash.url.replace(/\/$/, "");

describe("dashboard: API key", () => {
  it("without the key every page but /health answers 401; with the bearer key they work", async () => {
    assert.equal((await exchange(`${base()}/health`)).status, 200);
    const pages = [
      "/",
      `/run?id=${encodeURIComponent(runId)}`,
      "/api/runs",
      "/api/stamp",
      "/compare?id=x",
      "/nope",
    ];
    const wrong: Record<string, string>[] = [
      {},
      { authorization: "Bearer nope" },
      { cookie: "mage_dashboard=forged" },
    ];
    for (const path of pages)
      for (const headers of wrong)
        assert.equal((await exchange(`${base()}${path}`, { headers })).status, 401, path);
    assert.equal((await exchange(`${base()}/?key=wrong`)).status, 401);
    const auth = { authorization: `Bearer ${KEY}` };
    assert.equal((await exchange(`${base()}/`, { headers: auth })).status, 200);
    assert.equal(
      (await exchange(`${base()}/run?id=${encodeURIComponent(runId)}`, { headers: auth })).status,
      200,
    );
    const runs = JSON.parse((await exchange(`${base()}/api/runs`, { headers: auth })).text) as unknown[];
    assert.equal(runs.length, 1);
  });

  it("a browser logs in once with ?key=: a redirect without the key sets a cookie that opens every page", async () => {
    const login = await exchange(`${base()}/run?id=${encodeURIComponent(runId)}&key=${KEY}`);
    assert.equal(login.status, 303);
    assert.equal(login.headers.location, `/run?id=${encodeURIComponent(runId)}`);
    const setCookie = String(login.headers["set-cookie"]);
    assert.match(setCookie, /HttpOnly/);
    assert.match(setCookie, /SameSite=Strict/);
    assert.match(setCookie, /Max-Age=604800/, "kept a week, not only for the browser session");
    assert.ok(!setCookie.includes(KEY), "the cookie does not hold the key");
    const cookie = setCookie.split(";")[0];
    for (const path of ["/", login.headers.location as string, "/api/stamp"])
      assert.equal((await exchange(`${base()}${path}`, { headers: { cookie } })).status, 200, path);
  });
});

describe("dashboard: hostile clients", () => {
  it("refuses bodies and other methods, and serves a flood of pages with 100 stalled sockets open", async () => {
    const auth = { authorization: `Bearer ${KEY}` };
    const r = await upload(`${base()}/`, 4 * 1024 * 1024, { headers: auth });
    assert.equal(r.status, 405);
    const stalled = await stalledSockets(dash.url, 100);
    try {
      const pages = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          exchange(`${base()}${i % 2 ? "/" : "/api/runs"}`, { headers: auth }),
        ),
      );
      assert.ok(pages.every((p) => p.status === 200));
    } finally {
      for (const s of stalled) s.destroy();
    }
  });

  it("SIGTERM with connections open (stalled and keep-alive) exits 0 within 2 s", async () => {
    const cli = await startCli(["dashboard", root, "--port", "0"]);
    const stalled = await stalledSockets(cli.url, 20);
    await fetch(`${cli.url}/`);
    const { code, ms } = await terminate(cli);
    for (const s of stalled) s.destroy();
    assert.equal(code, 0, cli.stderr());
    assert.ok(ms < 2000, `exited ${ms.toFixed(0)} ms after SIGTERM`);
  });
});
