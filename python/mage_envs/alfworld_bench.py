"""Restart cost of the ALFWorld adapter against TextWorld's own reset (docs/environments.md).

    python -m mage_envs.alfworld_bench [--games 3] [--restarts 10]

For games spread over valid_seen: a session plays one step, then restarts, `--restarts` times (wall
and CPU time of each restart); then TextWorld's own reset of the same game, what the stock pipeline
runs for every attempt.
"""

from __future__ import annotations

import argparse
import statistics
import time

from .alfworld_server import AlfworldEnv, AlfworldSession
from .protocol import CreateArgs


def quantiles(xs: list[float]) -> str:
    s = sorted(xs)
    return f"median {statistics.median(s):.1f} p90 {s[int(len(s) * 0.9)]:.1f} max {s[-1]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_envs.alfworld_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=3)
    ap.add_argument("--restarts", type=int, default=10)
    a = ap.parse_args(argv)
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
        s.env.reset()
        reset_wall.append((time.perf_counter() - t0) * 1000)
        reset_cpu.append((time.process_time() - c0) * 1000)
    print(f"restart ({len(wall)} over {a.games} games): wall ms {quantiles(wall)}; CPU ms {quantiles(cpu)}")
    print(f"TextWorld's reset ({a.games} games): wall ms {quantiles(reset_wall)}; CPU ms {quantiles(reset_cpu)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
