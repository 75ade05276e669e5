"""Restart, step cost, memory and worker processes of the ALFWorld adapter (docs/environments.md).

    python -m mage_envs.alfworld_bench [--games 3] [--restarts 10]
    python -m mage_envs.alfworld_bench --sessions 40
    python -m mage_envs.alfworld_bench --steps 40
    python -m mage_envs.alfworld_bench --pool 1,2 [--sessions 16] [--seconds 15]

For games spread over valid_seen: a session plays one step, then restarts, `--restarts` times (wall
and CPU time of each restart); then TextWorld's own reset of the same game, what the stock pipeline
runs for every attempt.

`--steps N`: the cost of a game step (CPU and wall ms, median and mean) along the same commands
(admissible ones drawn by a seeded generator, restarting when the task is done) in `--games`
valid_seen games: TextWorld's stock environment under ALFWorld's wrappers with the infos
`AlfredTWEnv` requests (facts included), as this adapter stepped before sessions paid only for what
they use; a session's `/step` now (no facts, no expert, `alfworld_textgen`'s grammar); and a session
asked for the expert after every step, as a warm start's corpus does.

`--pool 1,2`: the server's worker processes (`worker_processes.py`) at each count, driven directly
from threads (no HTTP): `--sessions` sessions (default 16) created at once (creates/s), then stepped
at once for `--seconds` with random admissible commands, restarted when done (steps/s), each
worker's CPU per step and resident memory.

`--sessions N`: the memory a live session holds (the process's resident set over N sessions of
games spread over valid_seen, each after 5 steps and a restart), then after every one is closed
and N more are built (closed sessions' planner libraries are reused, so it should not grow); the
figure behind `alfworld_server.SESSION_BYTES`.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from .alfworld_expert import AlfworldExpert
from .alfworld_server import (SESSION_BYTES, THREADS_PER_WORKER, AlfworldEnv, AlfworldSession, offered, start_game,
                              worker_env)
from .protocol import CreateArgs
from .worker_processes import ProcessEnvironment


def resident_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def memory(n: int) -> int:
    env = AlfworldEnv()
    kept = len(env.games("valid_seen", [1, 2, 3, 4, 5, 6]))
    config = {"split": "valid_seen", "taskTypes": "all", "maxSteps": 30}

    def build(rnd: int) -> list[AlfworldSession]:
        out = []
        for i in range(n):
            seed = (i * kept // n + rnd) % kept
            s = env.create(CreateArgs(config=config, seed=seed, opponent_seed=0, opponent=None, seat=None))
            assert isinstance(s, AlfworldSession)
            legal = s.state()["legalActions"]
            for k in range(5):
                if not s.done:
                    s.step(f"<action>{legal[k % len(legal)]}</action>")
            s.restart()
            out.append(s)
        return out

    env.create(CreateArgs(config=config, seed=0, opponent_seed=0, opponent=None, seat=None)).close()  # imports, caches
    gc.collect()
    base = resident_bytes()
    t0 = time.perf_counter()
    live = build(0)
    gc.collect()
    held = resident_bytes() - base
    seconds = (time.perf_counter() - t0) / n
    print(f"{n} live sessions: {held / 1e6:.1f} MB resident, {held / n / 1e6:.2f} MB a session "
          f"({seconds:.2f} s a create with 5 steps and a restart); SESSION_BYTES = {SESSION_BYTES / 1e6:.0f} MB")
    for s in live:
        s.close()
    del live
    gc.collect()
    after_close = resident_bytes() - base
    again = build(1)
    gc.collect()
    regrown = resident_bytes() - base
    print(f"closed: {after_close / 1e6:.1f} MB still resident; {n} new sessions after them: {regrown / 1e6:.1f} MB "
          f"({(regrown - held) / n / 1e6:+.2f} MB a session against the first {n}); planner libraries loaded "
          f"{env.planners.loaded} for {2 * n + 1} sessions")
    del again
    return 0


def step_cost(games: int, steps: int) -> int:
    env = AlfworldEnv()
    kept = len(env.games("valid_seen", [1, 2, 3, 4, 5, 6]))
    config = {"split": "valid_seen", "taskTypes": "all", "maxSteps": 200}
    rows: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ("stock", "session", "expert")}
    for g in range(games):
        args = CreateArgs(config=config, seed=g * kept // games, opponent_seed=0, opponent=None, seat=None)
        rng = random.Random(g)
        for kind in rows:
            rng = random.Random(g)
            s = env.create(args)
            assert isinstance(s, AlfworldSession)
            stock = start_game(s.game.game_file) if kind == "stock" else None
            gs = stock.reset() if stock is not None else None
            wall, cpu = rows[kind]
            for _ in range(steps):
                legal = offered(list((gs if gs is not None else s.game.gs)["admissible_commands"]))
                command = legal[rng.randrange(len(legal))]
                t0, c0 = time.perf_counter(), time.process_time()
                if stock is not None:
                    gs, _, done = stock.step(command)
                    if done:
                        gs = stock.reset()
                else:
                    s.step(f"<action>{command}</action>")
                    if kind == "expert":
                        s.expert([])
                    if s.done:
                        s.restart()
                wall.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
            if stock is not None:
                stock.close()
            s.close()
    label = {"stock": "TextWorld's stock step (facts, stock grammar)", "session": "a session's /step",
             "expert": "a session's /step and /expert"}
    for kind, (wall, cpu) in rows.items():
        print(f"{label[kind]} ({len(cpu)} steps over {games} games): CPU ms median {statistics.median(cpu):.1f} "
              f"mean {statistics.mean(cpu):.1f}; wall ms median {statistics.median(wall):.1f} mean {statistics.mean(wall):.1f}")
    print(f"experts built: {AlfworldExpert.built} (one per game, by the sessions asked for it)")
    return 0


def _proc(pid: int) -> tuple[float, int]:
    """A process's CPU seconds so far and resident bytes (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    return cpu, rss


def pool_scaling(counts: list[int], sessions: int, seconds: float) -> int:
    config = {"split": "valid_seen", "taskTypes": "all", "maxSteps": 30}
    kept = len(AlfworldEnv().games("valid_seen", [1, 2, 3, 4, 5, 6]))
    print(f"{sessions} sessions at once, {seconds:g} s of steps; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for n in counts:
        pool = ProcessEnvironment(AlfworldEnv(), worker_env, (None,), n, preload=["mage_envs.alfworld_server"])
        try:
            idle = [_proc(w.pid)[1] for w in pool.workers]
            with ThreadPoolExecutor(max_workers=THREADS_PER_WORKER * n) as ex:
                t0 = time.perf_counter()
                built = list(ex.map(lambda i: pool.create(CreateArgs(config=config, seed=i * kept // sessions,
                                                                     opponent_seed=0, opponent=None, seat=None)),
                                    range(sessions)))
                create_s = time.perf_counter() - t0
                before = [_proc(w.pid)[0] for w in pool.workers]
                deadline = time.perf_counter() + seconds

                def play(k: int) -> int:
                    s, rng, steps = built[k], random.Random(k), 0
                    legal = s.state()["legalActions"]
                    while time.perf_counter() < deadline:
                        reply = s.step(f"<action>{legal[rng.randrange(len(legal))]}</action>")
                        steps += 1
                        if s.done:
                            s.restart()
                            legal = s.state()["legalActions"]
                        else:
                            legal = reply["legalActions"]
                    return steps

                t0 = time.perf_counter()
                steps = sum(ex.map(play, range(sessions)))
                step_s = time.perf_counter() - t0
            used = [_proc(w.pid) for w in pool.workers]
            cpu = sum(u[0] for u in used) - sum(before)
            print(f"{n} worker(s): {sessions / create_s:.2f} creates/s; {steps / step_s:.1f} steps/s "
                  f"({steps} steps); worker CPU {1000 * cpu / steps:.2f} ms a step; resident MB per worker "
                  f"idle {statistics.mean(idle) / 1e6:.0f}, with {sessions // n} sessions "
                  f"{statistics.mean(u[1] for u in used) / 1e6:.0f}")
            for s in built:
                s.close()
        finally:
            pool.close()
    return 0


def quantiles(xs: list[float]) -> str:
    s = sorted(xs)
    return f"median {statistics.median(s):.1f} p90 {s[int(len(s) * 0.9)]:.1f} max {s[-1]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.alfworld_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=3)
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=0, help="measure the memory of this many live sessions instead")
    ap.add_argument("--steps", type=int, default=0, help="measure the cost of this many steps per game instead")
    ap.add_argument("--pool", default="", help="measure the worker processes at these counts instead (1,2)")
    ap.add_argument("--seconds", type=float, default=15.0, help="--pool: seconds of steps at each count")
    a = ap.parse_args(argv)
    if a.pool:
        return pool_scaling([int(x) for x in a.pool.split(",")], a.sessions or 16, a.seconds)
    if a.sessions > 0:
        return memory(a.sessions)
    if a.steps > 0:
        return step_cost(a.games, a.steps)
    env = AlfworldEnv()
    kept = len(env.games("valid_seen", [1, 2, 3, 4, 5, 6]))
    wall: list[float] = []
    cpu: list[float] = []
    reset_wall: list[float] = []
    reset_cpu: list[float] = []
    for g in range(a.games):
        args = CreateArgs(config={"split": "valid_seen", "taskTypes": "all", "maxSteps": 30},
                          seed=g * kept // a.games, opponent_seed=0, opponent=None, seat=None)
        s = env.create(args)
        assert isinstance(s, AlfworldSession)
        legal = s.state()["legalActions"]
        for i in range(a.restarts):
            s.step(f"<action>{legal[i % len(legal)]}</action>")
            t0, c0 = time.perf_counter(), time.process_time()
            s.restart()
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        t0, c0 = time.perf_counter(), time.process_time()
        s.game.env.reset()
        reset_wall.append((time.perf_counter() - t0) * 1000)
        reset_cpu.append((time.process_time() - c0) * 1000)
    print(f"restart ({len(wall)} over {a.games} games): wall ms {quantiles(wall)}; CPU ms {quantiles(cpu)}")
    print(f"TextWorld's reset ({a.games} games): wall ms {quantiles(reset_wall)}; CPU ms {quantiles(reset_cpu)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
