/**
 * A worker thread of `mage env-serve`'s opponent pool (src/serve/opponent-pool.ts): plays one
 * opponent move per message. The opponent is rebuilt from its spec and its generator's state for
 * every move (MCTS starts a fresh tree per decision anyway; CFR policies are cached per thread),
 * so any worker can play any session's next move, and the generator's state after the move goes
 * back to the session.
 */
import { parentPort } from "node:worker_threads";
import { Rng, type RngState } from "../core/rng.js";
import { createOpponent } from "../opponents/registry.js";

export interface MoveJob {
  id: number;
  game: string;
  spec: string;
  /** The opponent's generator before the move. */
  rng: RngState;
  /** The game state to move in (structured-cloned: plain data). */
  state: unknown;
}

export type MoveReply =
  | { id: number; ok: true; move: unknown; rng: RngState }
  | { id: number; ok: false; error: string };

async function play(job: MoveJob): Promise<MoveReply> {
  try {
    const rng = Rng.fromState(job.rng);
    const opponent = createOpponent<unknown, unknown>(job.game, job.spec, { rng, replay: false });
    const move = await opponent.act(job.state);
    return { id: job.id, ok: true, move, rng: rng.getState() };
  } catch (err) {
    return { id: job.id, ok: false, error: err instanceof Error ? err.message : String(err) };
  }
}

/** What a worker posts: a move's reply, or once, when it can take moves, that it is ready. */
export type WorkerMessage = MoveReply | { ready: true };

const port = parentPort;
if (port) {
  port.on("message", (job: MoveJob) => void play(job).then((reply) => port.postMessage(reply)));
  port.postMessage({ ready: true } satisfies WorkerMessage);
}
