/**
 * A stand-in for `python -m vllm.entrypoints.openai.api_server ARGS` as a process, for the
 * managed-server tests: the fake vLLM of `fake-vllm.ts` on the `--port` it is given, plus an
 * "engine" child process in the same process group (as vLLM's engine core and worker are), so the
 * tests can check that stopping the server leaves nothing behind. It writes
 * `{"server": pid, "engine": pid, "argv": [...], "env": {...}}` to $FAKE_VLLM_PIDS once started.
 *
 * $FAKE_VLLM_MODE:
 * - `ok` (default): ready at once;
 * - `die-at-start`: prints a few lines and a made-up error, then exits with code 3;
 * - `never-ready`: prints, but never listens;
 * - `stubborn`: ignores SIGTERM (so does its engine): only SIGKILL ends it;
 * - `die-after:N`: exits with code 9 at its Nth chat completion request.
 *
 * Started through `fakeVllmPython()` (`vllm-fakes.ts`), which stands in for the vLLM interpreter.
 */
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { startFakeVllm } from "./fake-vllm.js";

const args = process.argv.slice(2);
// The last --port wins, as with argparse.
const portAt = args.lastIndexOf("--port");
const port = portAt >= 0 ? Number(args[portAt + 1]) : 0;
const mode = process.env.FAKE_VLLM_MODE ?? "ok";

const engine = spawn(
  "sh",
  ["-c", mode === "stubborn" ? 'trap "" TERM; while :; do sleep 1; done' : "exec sleep 1000"],
  { stdio: "ignore" },
);
if (mode === "stubborn") process.on("SIGTERM", () => console.log("fake vLLM: ignoring SIGTERM"));
else process.on("SIGTERM", () => process.exit(0));

if (process.env.FAKE_VLLM_PIDS)
  writeFileSync(
    process.env.FAKE_VLLM_PIDS,
    JSON.stringify({
      server: process.pid,
      engine: engine.pid,
      argv: args,
      env: {
        VLLM_ALLOW_RUNTIME_LORA_UPDATING: process.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING ?? null,
        VLLM_CPU_NUM_OF_RESERVED_CPU: process.env.VLLM_CPU_NUM_OF_RESERVED_CPU ?? null,
        LD_PRELOAD: process.env.LD_PRELOAD ?? null,
        VLLM_SERVER_DEV_MODE: process.env.VLLM_SERVER_DEV_MODE ?? null,
        PYTHONPATH: process.env.PYTHONPATH ?? null,
      },
    }),
  );
console.log(`fake vLLM: starting on port ${port} (mode ${mode})`);
console.error("INFO fake vLLM: loading weights");

if (mode === "die-at-start") {
  console.error("ValueError: fake vLLM cannot start: out of fake memory");
  process.exit(3);
}
if (mode !== "never-ready") {
  const dieAfter = mode.startsWith("die-after:") ? Number(mode.slice("die-after:".length)) : 0;
  let chats = 0;
  await startFakeVllm({
    port,
    log: (line) => console.log(line),
    onCall: () => {
      chats += 1;
      if (dieAfter > 0 && chats >= dieAfter) {
        console.error(`fake vLLM: EngineDeadError at request ${chats}`);
        process.exit(9);
      }
    },
  });
  console.log("INFO:     Application startup complete.");
} else {
  setInterval(() => {}, 60_000);
}
