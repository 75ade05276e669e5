/**
 * Worker thread of `SftShardPool`: computes the SFT gradient of one shard of each batch. The
 * parameters and this worker's gradient live in SharedArrayBuffers set up by the pool, so a step
 * moves only the shard's token ids and a few numbers through messages.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { ModelConfig } from "../../model/config.js";
import { selectKernels } from "../../model/kernels/select.js";
import { paramsOn } from "../../model/params.js";
import { backward, forwardTrain } from "../../model/transformer.js";
import { sftLossFor } from "./sft.js";

export interface ShardWorkerData {
  config: ModelConfig;
  kernels: string;
  params: SharedArrayBuffer;
  grads: SharedArrayBuffer;
}

export interface ShardRequest {
  sequences: Int32Array[];
  lossMask: Uint8Array[];
  /** Loss weight of the whole batch (see `sftLossFor`). */
  totalWeight: number;
}

export type ShardReply =
  | { ok: true; loss: number; scored: number; tokens: number }
  | { ok: false; error: string };

async function main(): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error("sft-shard-worker must run as a worker thread");
  const data = workerData as ShardWorkerData;
  // The pool resolved the kernel in the main thread; naming it here (MAGE_KERNELS cleared) loads the same one or fails loudly.
  const kernels = await selectKernels(data.kernels, { ...process.env, MAGE_KERNELS: "" });
  const params = paramsOn(data.config, new Float32Array(data.params));
  const grads = paramsOn(data.config, new Float32Array(data.grads));
  port.on("message", (req: ShardRequest) => {
    let reply: ShardReply;
    try {
      grads.flat.fill(0);
      const fw = forwardTrain(params, req, kernels, true);
      const res = sftLossFor(req, req.totalWeight)(fw.stats);
      backward(fw, res.dLogp, res.dEntropy, grads);
      reply = { ok: true, loss: res.loss, scored: fw.scored, tokens: fw.tokens };
    } catch (e) {
      reply = { ok: false, error: (e as Error).stack ?? String(e) };
    }
    port.postMessage(reply);
  });
  port.postMessage({ ok: true, loss: 0, scored: 0, tokens: 0 } satisfies ShardReply);
}

void main();
