/**
 * Starts a managed vLLM server (the stand-in interpreter given as argv[3]), prints
 * `ready <process group>`, then ends as argv[2] says, without stopping the server:
 * `exit` (process.exit), `throw` (an uncaught error), `wait` (until killed from outside).
 */

import { VllmServer } from "../../src/learner/torch/vllm-server.js";
import { TorchVllmSchema } from "../../src/train/config.js";

const [how, python] = process.argv.slice(2);
const server = await VllmServer.start({
  model: "/nonexistent-model",
  servedName: "base",
  vllm: TorchVllmSchema.parse({ python, startTimeoutS: 60 }),
  loraRank: 4,
  dtype: "float32",
  contextLength: 512,
});
console.log(`ready ${server.pid}`);
if (how === "exit") process.exit(7);
if (how === "throw")
  setTimeout(() => {
    throw new Error("the holder crashed");
  }, 10);
if (how === "wait") setInterval(() => {}, 60_000);
