"""Steps per second through the protocol (HTTP on loopback) for the TextWorldExpress and ScienceWorld
adapters, and the valid-action rate of a random policy over what the prompt shows
(docs/measurements.md).

    python -m mage_envs.text_env_bench --env twx-coin [--steps 2000] [--config '{"numLocations": 6}']
    python -m mage_envs.text_env_bench --env sw-boil --steps 300 [--stock 50] [--in-list 200]
    python -m mage_envs.text_env_bench --coin-expert 100 --locations 6

The server runs as its own process (`python -m mage_envs.<adapter> --port 0`); one client session
plays a seeded random policy, restarting each finished attempt, on seeds of the train split. The
policy picks uniformly from the listed legal actions (TextWorldExpress) or, where none are listed
(ScienceWorld), fills a random action template with random objects from the observation's `Objects in
view` line. `--stock N` (ScienceWorld) also times N steps of the package's own `ScienceWorldEnv.step`,
which builds the valid-action list every step; `--in-list N` (ScienceWorld) counts how many of N
random picks are in that list (in-process).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import statistics
import subprocess
import sys
import time
from typing import Any


class Http:
    """One keep-alive connection to the server."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        reply: dict[str, Any] = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {reply}")
        return reply


def start(env: str, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], int]:
    module = "mage_envs.scienceworld_server" if env.startswith("sw-") else "mage_envs.textworld_express_server"
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", "0", *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    raise RuntimeError(f"{module} did not start")


def sw_action(rng: random.Random, templates: list[str], observation: str) -> str:
    m = re.search(r"Objects in view: (.*)\.$", observation)
    objects = m.group(1).split(", ") if m else ["agent"]
    template = rng.choice(templates)
    while "OBJ" in template:
        template = template.replace("OBJ", rng.choice(objects), 1)
    return template


def templates_of(rules: str) -> list[str]:
    m = re.search(r"templates by putting an object in view in place of OBJ: (.*?)\. Objects are named", rules)
    return m.group(1).split(", ") if m else []


def bench(env: str, steps: int, config: dict[str, Any], seed: int, sessions: int = 1, jvms: int = 0) -> None:
    proc, port = start(env, ("--jvms", str(jvms)) if jvms else ())
    try:
        http = Http(port)
        rng = random.Random(seed)
        t0 = time.perf_counter()
        created = [http.post("/create", {"env": env, "seed": 1 + i, "config": config}) for i in range(sessions)]
        create_ms = (time.perf_counter() - t0) * 1000 / sessions
        templates = templates_of(created[0]["prompt"]["rules"])
        live = [{"sid": c["session"], "state": c, "seq": 0} for c in created]
        step_ms: list[float] = []
        restart_ms: list[float] = []
        valid = won = attempts = 0
        turn = 0
        while len(step_ms) < steps:
            s = live[turn % sessions]  # the sessions take turns, as concurrent trials do
            turn += 1
            state = s["state"]
            s["seq"] += 1
            if state["done"]:
                attempts += 1
                t = time.perf_counter()
                s["state"] = http.post("/restart", {"session": s["sid"], "seq": s["seq"]})
                restart_ms.append((time.perf_counter() - t) * 1000)
                continue
            legal = state.get("legalActions")
            action = rng.choice(legal) if legal else sw_action(rng, templates, state["observation"])
            t = time.perf_counter()
            reply = http.post("/step", {"session": s["sid"], "seq": s["seq"], "action": f"<action>{action}</action>"})
            step_ms.append((time.perf_counter() - t) * 1000)
            valid += bool(reply["valid"])
            won += bool(reply["won"])
            s["state"] = reply if reply["valid"] else {**state, "observation": reply["observation"]}
        total = sum(step_ms) / 1000
        print(f"{env} {json.dumps(config)}, {sessions} session(s) taking turns: {len(step_ms)} steps in {total:.2f} s = "
              f"{len(step_ms) / total:.0f} steps/s (median {statistics.median(step_ms):.2f} ms, "
              f"p90 {sorted(step_ms)[int(0.9 * len(step_ms))]:.2f} ms); valid {valid / len(step_ms):.1%}; {attempts} attempts "
              f"ended, {won} won; create {create_ms:.0f} ms; "
              f"restart median {statistics.median(restart_ms) if restart_ms else float('nan'):.1f} ms")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def stock(task: str, steps: int, seed: int) -> None:
    from scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv(task)
    env.load(task, 1, "")
    _, info = env.reset()
    rng = random.Random(seed)
    times = []
    sizes = []
    for _ in range(steps):
        action = rng.choice(info["valid"])
        t = time.perf_counter()
        _, _, done, info = env.step(action)
        times.append((time.perf_counter() - t) * 1000)
        sizes.append(len(info["valid"]))
        if done:
            _, info = env.reset()
    env.close()
    print(f"stock ScienceWorldEnv.step on {task}: median {statistics.median(times):.0f} ms a step "
          f"({1000 / statistics.mean(times):.1f} steps/s); valid-action list median {statistics.median(sizes):.0f} strings")


def in_valid_list(task: str, steps: int, seed: int) -> None:
    """How many of the random policy's picks are in the engine's own valid-action list (in-process)."""
    from .protocol import CreateArgs
    from .scienceworld_server import SwSession, environments

    env = environments([task])[0]
    cfg = {k: v["default"] for k, v in env.describe()["config"].items()}
    s = env.create(CreateArgs(cfg, 1, 0, None, None))
    assert isinstance(s, SwSession)
    templates = templates_of(s.prompt()["rules"])
    rng = random.Random(seed)
    listed = parsed = 0
    for _ in range(steps):
        if s.done:
            s.restart()
        action = sw_action(rng, templates, s.observation)
        with s.engine.lock:
            valid = set(map(str, s.engine.bind(s).getValidActionObjectCombinations()))
        listed += action in valid
        parsed += bool(s.step(f"<action>{action}</action>")["valid"])
    print(f"{task}: of {steps} random template fills, {parsed / steps:.1%} understood by the engine, "
          f"{listed / steps:.1%} in its valid-action list")


def coin_expert(seeds: int, locations: int) -> None:
    """The coin expert on train seeds 0..seeds-1 (in-process): from the start, with a winning attempt's
    facts, and with the facts of an attempt cut at half the steps the expert needed."""
    from .protocol import CreateArgs
    from .textworld_express_server import TwxSession, environments

    env = environments(["coin"])[0]

    def session(seed: int, **config: Any) -> TwxSession:
        cfg = {k: v["default"] for k, v in env.describe()["config"].items()} | {"numLocations": locations} | config
        s = env.create(CreateArgs(cfg, seed, 0, None, None))
        assert isinstance(s, TwxSession)
        return s

    def follow(s: TwxSession, memory: list[str]) -> int | None:
        while not s.done:
            action = s.expert(memory)["action"]
            if action is None:
                return None
            s.step(f"<action>{action}</action>")
        return s.steps if s.won else None

    fresh: list[int] = []
    gold: list[int] = []
    informed: list[int | None] = []
    halves: list[tuple[int, int | None]] = []
    for seed in range(seeds):
        s = session(seed)
        n = follow(s, [])
        if n is None:
            continue
        fresh.append(n)
        gold.append(len(s.gold()))
        informed.append(follow(session(seed), s.expert([])["facts"]))
        if n >= 4:
            cut = session(seed, maxSteps=n // 2)
            follow(cut, [])
            halves.append((n, follow(session(seed), cut.expert([])["facts"])))
    won_after = [b for _, b in halves if b is not None]
    print(f"coin, numLocations={locations}: the expert won {len(fresh)}/{seeds} train seeds from the start, "
          f"{statistics.mean(fresh):.1f} steps on average (median {statistics.median(fresh)}, max {max(fresh)}); "
          f"TextWorldExpress's gold paths {statistics.mean(gold):.1f}; with the winning attempt's facts "
          f"{statistics.mean(x for x in informed if x is not None):.1f} steps ({sum(x is not None for x in informed)} won); "
          f"with the facts of an attempt cut at half its steps ({len(halves)} seeds needing >= 4): "
          f"{statistics.mean(a for a, _ in halves):.1f} -> {statistics.mean(won_after):.1f} steps "
          f"({len(won_after)} won; shorter on {sum(b is not None and b < a for a, b in halves)}, "
          f"longer on {sum(b is not None and b > a for a, b in halves)})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.text_env_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--coin-expert", type=int, default=0, metavar="SEEDS",
                    help="instead: the coin expert on train seeds 0..SEEDS-1 (with --locations)")
    ap.add_argument("--locations", type=int, default=11)
    ap.add_argument("--env", default=None, help="an environment name: twx-<game> or sw-<task>")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--jvms", type=int, default=0, help="ScienceWorld: the server's --jvms (default: its own)")
    ap.add_argument("--sessions", type=int, default=1, help="sessions stepped in turn (each switch replays on a one-game engine)")
    ap.add_argument("--config", default="{}", help="the /create config as JSON")
    ap.add_argument("--seed", type=int, default=0, help="the random policy's seed")
    ap.add_argument("--in-list", type=int, default=0, metavar="N",
                    help="ScienceWorld: also check N random picks against the engine's valid-action list")
    ap.add_argument("--stock", type=int, default=0, metavar="N", help="ScienceWorld: also time N stock steps")
    a = ap.parse_args(argv)
    if a.coin_expert:
        coin_expert(a.coin_expert, a.locations)
        return 0
    if a.env is None:
        ap.error("--env is required")
    bench(a.env, a.steps, json.loads(a.config), a.seed, max(1, a.sessions), a.jvms)
    if a.stock and a.env.startswith("sw-"):
        stock(a.env[3:], a.stock, a.seed)
    if a.in_list and a.env.startswith("sw-"):
        in_valid_list(a.env[3:], a.in_list, a.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
