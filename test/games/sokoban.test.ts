import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { UsageError } from "../../src/core/errors.js";
import { Rng } from "../../src/core/rng.js";
import {
  applySokobanMove,
  DEFAULT_SOKOBAN_KNOBS,
  deadSquares,
  generateSokobanLevel,
  hasCornerDeadlock,
  hasSimpleDeadlock,
  isDeadlocked,
  isSolved,
  parseSokoban,
  renderSokoban,
  restartSokoban,
  SOKOBAN_MOVES,
  type SokobanMove,
  type SokobanState,
  solvability,
  solve,
  stepMoves,
  stepSokoban,
  TARGET,
  WALL,
} from "../../src/games/sokoban/index.js";

/** Independent ground truth: plain BFS over applySokobanMove, no pruning. */
function naiveShortest(start: SokobanState, cap = 200_000): number | null {
  const key = (s: SokobanState) => `${s.player}|${s.boxes.join(",")}`;
  if (isSolved(start)) return 0;
  const seen = new Set([key(start)]);
  let frontier = [start];
  for (let depth = 1; frontier.length > 0; depth++) {
    const next: SokobanState[] = [];
    for (const s of frontier) {
      for (const m of SOKOBAN_MOVES) {
        const r = applySokobanMove(s, m);
        if (!r.moved) continue;
        if (r.solved) return depth;
        const k = key(r.state);
        if (seen.has(k)) continue;
        seen.add(k);
        next.push(r.state);
        if (seen.size > cap) throw new Error("naive BFS cap");
      }
    }
    frontier = next;
  }
  return null;
}

function close(actual: number, expected: number, msg?: string) {
  assert.ok(Math.abs(actual - expected) < 1e-9, `${msg ?? "reward"}: ${actual} !== ${expected}`);
}

describe("sokoban generator", () => {
  it("200 levels from several seeds are all BFS-solvable within [minSteps, maxSolSteps]", () => {
    const { minSteps, maxSolSteps, searchDepth } = DEFAULT_SOKOBAN_KNOBS;
    const lengths = new Set<number>();
    let count = 0;
    for (const seed of [1, 4608, 5608, 99991]) {
      const root = Rng.seeded(seed);
      for (let i = 0; i < 50; i++) {
        const level = generateSokobanLevel(root.derive("task", i));
        const s = level.initial;
        const { rows, cols, tiles } = level.room;
        assert.deepEqual([rows, cols], [6, 6]);
        for (let c = 0; c < rows * cols; c++) {
          const r = Math.floor(c / cols);
          const col = c % cols;
          if (r === 0 || col === 0 || r === rows - 1 || col === cols - 1) assert.equal(tiles[c], WALL);
        }
        assert.equal(s.boxes.length, 2);
        assert.equal(level.room.targets.length, 2);
        assert.ok(
          s.boxes.every((b) => tiles[b] !== TARGET),
          "every box starts off target",
        );
        const res = solve(s, { maxDepth: searchDepth });
        assert.equal(res.status, "solved", renderSokoban(s));
        if (res.status !== "solved") continue;
        assert.ok(
          res.moves.length >= minSteps && res.moves.length <= maxSolSteps,
          `length ${res.moves.length}`,
        );
        assert.equal(res.moves.length, level.solution.length);
        // the stored solution really solves the level, and only at its last move
        const played = stepMoves(s, level.solution);
        assert.equal(played.solved, true);
        assert.equal(played.movesApplied, level.solution.length);
        assert.equal(isDeadlocked(s), false);
        lengths.add(res.moves.length);
        count++;
      }
    }
    assert.equal(count, 200);
    assert.ok(lengths.size >= 5, `solution lengths vary (${[...lengths].join(",")})`);
  });

  it("BFS solution lengths are shortest (checked against an unpruned BFS)", () => {
    const root = Rng.seeded("naive");
    for (let i = 0; i < 40; i++) {
      const level = generateSokobanLevel(root.derive("task", i));
      assert.equal(naiveShortest(level.initial), level.solution.length, renderSokoban(level.initial));
    }
  });

  it("is deterministic: same rng key ⇒ same level, different keys ⇒ different levels", () => {
    const a = generateSokobanLevel(Rng.seeded(123).derive("task", 5));
    const b = generateSokobanLevel(Rng.seeded(123).derive("task", 5));
    assert.equal(renderSokoban(a.initial), renderSokoban(b.initial));
    assert.deepEqual(a.solution, b.solution);
    assert.equal(a.attempt, b.attempt);
    const renders = new Set<string>();
    for (let i = 0; i < 20; i++)
      renders.add(renderSokoban(generateSokobanLevel(Rng.seeded(123).derive("task", i)).initial));
    assert.ok(renders.size >= 18, `only ${renders.size} distinct levels out of 20`);
  });

  it("respects other knobs (room size, one box, narrow window)", () => {
    for (let i = 0; i < 10; i++) {
      const level = generateSokobanLevel(Rng.seeded(i), {
        roomSize: [7, 8],
        numBoxes: 1,
        minSteps: 8,
        maxSolSteps: 12,
      });
      assert.equal(level.room.rows, 7);
      assert.equal(level.room.cols, 8);
      assert.equal(level.initial.boxes.length, 1);
      const res = solve(level.initial);
      assert.equal(res.status, "solved");
      if (res.status === "solved") assert.ok(res.moves.length >= 8 && res.moves.length <= 12);
    }
  });

  it("throws a UsageError naming the knobs when no level fits", () => {
    assert.throws(
      () => generateSokobanLevel(Rng.seeded(1), { minSteps: 90, maxSolSteps: 95, maxTries: 5 }),
      (e: unknown) =>
        e instanceof UsageError &&
        /maxTries=5/.test(e.message) &&
        /minSteps=90/.test(e.message) &&
        /maxSolSteps=95/.test(e.message),
    );
    assert.throws(() => generateSokobanLevel(Rng.seeded(1), { minSteps: 10, maxSolSteps: 5 }), UsageError);
    assert.throws(() => generateSokobanLevel(Rng.seeded(1), { roomSize: [3, 3], numBoxes: 2 }), UsageError);
  });

  it("restart restores the identical initial state", () => {
    const level = generateSokobanLevel(Rng.seeded(77));
    const before = renderSokoban(level.initial);
    const snapshot = structuredClone({ player: level.initial.player, boxes: [...level.initial.boxes] });
    let s = level.initial;
    const rng = Rng.seeded("walk");
    for (let i = 0; i < 15; i++) s = stepMoves(s, [rng.pick(SOKOBAN_MOVES)], { stopOnDeadlock: false }).state;
    s = stepMoves(s, level.solution, { stopOnDeadlock: false }).state;
    const again = restartSokoban(level);
    assert.equal(again, level.initial);
    assert.equal(renderSokoban(again), before);
    assert.deepEqual({ player: again.player, boxes: [...again.boxes] }, snapshot);
    // and replaying the solution from the restart solves it again
    assert.equal(stepMoves(again, level.solution).solved, true);
    assert.ok(Object.isFrozen(level.initial) && Object.isFrozen(level.initial.boxes));
  });
});

describe("sokoban rendering and parsing", () => {
  it("renders text_with_row_numbers and parses it back", () => {
    const s = parseSokoban(["#####", "#@$.#", "#####"]);
    // player on a target is drawn S; box on target √
    const t = parseSokoban(["######", "#+$  #", "#  * #", "######"]);
    assert.equal(
      renderSokoban(t),
      ["0: # # # # # #", "1: # S X _ _ #", "2: # _ _ √ _ #", "3: # # # # # #"].join("\n"),
    );
    assert.equal(renderSokoban(parseSokoban(renderSokoban(t))), renderSokoban(t));
    assert.equal(renderSokoban(s).split("\n")[1], "1: # P X O #");
    assert.throws(() => parseSokoban(["###", "#@ ", "###"]), UsageError); // open border
    assert.throws(() => parseSokoban(["####", "#@?#", "####"]), UsageError);
  });
});

describe("sokoban rewards", () => {
  // Row 1: player, box, floor, target, floor. Row 2: a second box off its target.
  const board = parseSokoban(["#######", "#@$ . #", "#  $ .#", "#######"]);
  const oneBox = parseSokoban(["######", "#@$ .#", "######"]);

  it("−0.1 per move, +1 box onto target, −1 box off target", () => {
    const a = stepSokoban(board, "right"); // box to (1,3), floor → floor
    close(a.reward, -0.1);
    assert.equal(a.movesApplied, 1);
    const b = stepSokoban(a.state, "right"); // box onto target
    close(b.reward, 0.9);
    assert.equal(b.solved, false);
    const c = stepSokoban(b.state, "right"); // box off target
    close(c.reward, -1.1);
    const plain = stepSokoban(board, "down"); // plain move
    close(plain.reward, -0.1);
    assert.equal(plain.state.player, board.player + board.room.cols);
  });

  it("a wall bump or an unpushable box costs −0.1 and changes nothing", () => {
    const bump = stepSokoban(board, "up");
    close(bump.reward, -0.1);
    assert.equal(bump.movesApplied, 1);
    assert.equal(renderSokoban(bump.state), renderSokoban(board));
    const blocked = parseSokoban(["######", "#    #", "#@$$.#", "#   .#", "######"]);
    const r = stepSokoban(blocked, "right"); // box with a box behind it
    close(r.reward, -0.1);
    assert.equal(r.movesApplied, 1);
    assert.equal(r.deadlocked, false);
    assert.equal(renderSokoban(r.state), renderSokoban(blocked));
    const walled = parseSokoban(["######", "# . ##", "#@$# #", "#    #", "######"]);
    const q = stepSokoban(walled, "right"); // box with a wall behind it
    close(q.reward, -0.1);
    assert.equal(renderSokoban(q.state), renderSokoban(walled));
    const w = stepSokoban(parseSokoban(["#####", "#.$@#", "#####"]), "left");
    close(w.reward, 10.9); // pushes onto the target and solves
    assert.equal(w.solved, true);
  });

  it("solving adds +10, a turn scores the sum, and moves after the solve are ignored", () => {
    const r = stepMoves(oneBox, ["up", "right", "right", "left", "left", "down"]);
    // up: bump (−0.1); right: push floor→floor (−0.1); right: push onto target, solved (+10.9)
    close(r.reward, -0.1 - 0.1 + 10.9);
    assert.equal(r.movesApplied, 3);
    assert.equal(r.solved, true);
    assert.equal(r.deadlocked, false);
    assert.equal(r.state.player, oneBox.player + 2);
    // a solved state ignores everything
    const after = stepMoves(r.state, ["left", "left"]);
    assert.equal(after.movesApplied, 0);
    assert.equal(after.reward, 0);
    assert.equal(after.state, r.state);
    // the two-box board: push one box on (+0.9), walk round, push the other on (+10.9)
    const two = parseSokoban(["######", "#@$ .#", "#  $.#", "######"]);
    const t = stepMoves(two, ["right", "right", "left", "down", "right", "up", "left"]);
    assert.equal(t.solved, true);
    assert.equal(t.movesApplied, 5);
    close(t.reward, -0.1 + 0.9 - 0.1 - 0.1 + 10.9);
  });

  it("stops a turn at a dead lock unless told not to", () => {
    // pushing the box left into the corner dead-locks it
    const s = parseSokoban(["######", "# $@.#", "#    #", "######"]);
    const r = stepMoves(s, ["left", "right", "right"]);
    assert.equal(r.deadlocked, true);
    assert.equal(r.movesApplied, 1);
    close(r.reward, -0.1);
    const all = stepMoves(s, ["left", "right", "right"], { stopOnDeadlock: false });
    assert.equal(all.movesApplied, 3);
    assert.equal(all.deadlocked, true);
  });
});

describe("sokoban dead locks", () => {
  it("a box in a non-target corner", () => {
    const s = parseSokoban(["######", "#$   #", "#  @.#", "######"]);
    assert.equal(hasCornerDeadlock(s), true);
    assert.equal(hasSimpleDeadlock(s), true);
    assert.equal(isDeadlocked(s), true);
    assert.equal(solve(s).status, "unsolvable");
    assert.equal(naiveShortest(s), null);
    assert.ok(deadSquares(s.room).includes(s.room.cols + 1));
    // a box on a target in a corner is fine
    const ok = parseSokoban(["######", "#*   #", "#    #", "# $@.#", "######"]);
    assert.equal(hasCornerDeadlock(ok), false);
    assert.equal(hasSimpleDeadlock(ok), false);
    assert.equal(isDeadlocked(ok), false);
    assert.equal(naiveShortest(ok), 6);
  });

  it("two boxes side by side against a wall", () => {
    const s = parseSokoban(["#######", "#.$$. #", "#  @  #", "#######"]);
    assert.equal(hasCornerDeadlock(s), false, "no box is in a corner");
    assert.equal(hasSimpleDeadlock(s), true);
    assert.equal(isDeadlocked(s), true);
    assert.equal(naiveShortest(s), null, "ground truth: unsolvable");
    // one cell apart along the same wall: solvable
    const apart = parseSokoban(["#######", "#.$ $.#", "#  @  #", "#######"]);
    assert.equal(hasSimpleDeadlock(apart), false);
    assert.equal(isDeadlocked(apart), false);
    assert.equal(naiveShortest(apart), (solve(apart) as { moves: SokobanMove[] }).moves.length);
  });

  it("a dead lock only search finds (player walled off), and no false alarms on levels", () => {
    const s = parseSokoban(["#######", "#@#   #", "###$  #", "#  .  #", "#######"]);
    assert.equal(hasSimpleDeadlock(s), false);
    assert.equal(isDeadlocked(s), true);
    assert.equal(solvability(s), "unsolvable");
    assert.equal(naiveShortest(s), null);
    // random walks on generated levels: isDeadlocked agrees with the unpruned BFS
    const rng = Rng.seeded("deadlock-agreement");
    let dead = 0;
    let alive = 0;
    for (let i = 0; i < 30; i++) {
      let st = generateSokobanLevel(rng.derive("level-for", i)).initial;
      for (let j = 0; j < 12; j++) st = applySokobanMove(st, rng.pick(SOKOBAN_MOVES)).state;
      const truth = naiveShortest(st) === null;
      assert.equal(isDeadlocked(st), truth, renderSokoban(st));
      if (hasSimpleDeadlock(st)) assert.equal(truth, true, "cheap checks are sound");
      if (truth) dead++;
      else alive++;
    }
    assert.ok(dead > 0 && alive > 0, `both kinds seen (dead ${dead}, alive ${alive})`);
  });
});
