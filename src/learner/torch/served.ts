/**
 * Rollouts from an OpenAI-compatible vLLM server while the PyTorch worker trains
 * (`model.torch.rollout: openai`, or `vllm` for the server mage starts itself: `vllm-server.ts`). Generation goes through `OpenAIChatPolicy`; after every update
 * the trainer calls `push()` so the server samples from the new weights:
 *
 * - LoRA: the worker saves the adapter to a NEW directory per push
 *   (`RUN/served/adapter-NNNNNN`), the server loads it with vLLM's runtime LoRA API
 *   (`POST /v1/load_lora_adapter {lora_name, lora_path}`; the server needs `--enable-lora` and
 *   `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), rollouts then ask for `model: lora_name`, and the
 *   previous adapter is unloaded (`POST /v1/unload_lora_adapter {lora_name}`) and deleted.
 * - Full weights: the worker saves into `rolloutWeightsDir`, the directory the server was started
 *   from (`vllm serve DIR`), then asks the server to reload them from disk:
 *   `POST /collective_rpc {"method": "reload_weights"}` (vLLM's development endpoint; start the
 *   server with `VLLM_SERVER_DEV_MODE=1`).
 * - Reloaded weights (`reload`, the server mage starts with `vllm.push: merged` or full
 *   fine-tuning): the worker writes the policy's weights, a LoRA adapter merged in, as one
 *   safetensors file into a NEW directory per push (`RUN/served/weights-NNNNNN-k`, the worker's
 *   `push_weights`), the server reloads them in place through mage's worker extension
 *   (`POST /collective_rpc {"method": "mage_reload_weights", "args": [DIR]}`,
 *   `python/mage_learner/vllm_ext.py`), its prefix cache is emptied (`POST /reset_prefix_cache`:
 *   cached keys and values belong to the old weights), and the previous directory is deleted.
 *   Rollouts keep asking for the base model's name.
 *
 * The server's log-probs are not the learner's (another kernel, maybe another dtype), so the
 * trainer recomputes the old log-probs with the learner before every update; the server must
 * return the sampled token ids (`return_tokens_as_token_ids`, asked for here) so the learner
 * trains on exactly what was sampled.
 */
import { rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { OpenAIChatPolicy, type OpenAIChatPolicyOptions } from "../../policy/openai.js";
import type { GenerateRequest, Generation, Policy } from "../../policy/types.js";
import type { TorchLearner } from "./learner.js";
import { TorchPolicy } from "./policy.js";

export interface ServedRolloutOptions {
  learner: TorchLearner;
  /** e.g. http://127.0.0.1:8000/v1 */
  baseUrl: string;
  /** The server's name for the base model. */
  model: string;
  /** LoRA adapters (runtime LoRA API) or full weights (reload from disk). */
  lora: boolean;
  /** Where adapters are saved, one directory per push (LoRA). */
  adapterDir: string;
  /** The directory the server loads full weights from (full fine-tuning). */
  weightsDir: string | null;
  /**
   * Push whole weights (merged with LoRA) for mage's worker extension to reload, written in this
   * dtype (the server's `--dtype`); takes precedence over `lora` and `weightsDir`.
   */
  reload?: { dtype: string } | null;
  /** Extra options of the chat policy (tests: fetch, retries, timeouts). */
  policy?: Partial<OpenAIChatPolicyOptions>;
  fetch?: typeof fetch;
  /**
   * A server mage started (`rollout: vllm`): why it is gone, or null while it runs. A request that
   * fails while it is gone fails with this error instead (no retries against a dead server).
   */
  serverFailure?: () => Error | null;
}

export class ServedRolloutPolicy implements Policy {
  readonly name: string;
  private chat: OpenAIChatPolicy;
  private adapter: { name: string; path: string } | null = null;
  private weights: string | null = null;
  private pushes = 0;
  private readonly local: TorchPolicy;
  private readonly root: string;
  private readonly fetchFn: typeof fetch;

  constructor(private readonly o: ServedRolloutOptions) {
    this.name = `served:${o.model}`;
    const base = o.fetch ?? globalThis.fetch;
    const failure = o.serverFailure;
    this.fetchFn = failure
      ? async (input, init) => {
          const dead = failure();
          if (dead) throw dead;
          return base(input, init);
        }
      : base;
    this.chat = this.makeChat(o.model);
    this.local = new TorchPolicy(o.learner);
    // The server's root: admin endpoints like /collective_rpc live outside /v1.
    const u = new URL(o.baseUrl);
    u.pathname = u.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
    this.root = u.toString().replace(/\/+$/, "");
  }

  /** The model name rollouts ask for now (the latest adapter's, or the base model's). */
  get servedModel(): string {
    return this.chat.model;
  }

  private makeChat(model: string): OpenAIChatPolicy {
    return new OpenAIChatPolicy({
      baseUrl: this.o.baseUrl,
      model,
      fetch: this.fetchFn,
      ...this.o.policy,
      extraBody: { return_tokens_as_token_ids: true, ...this.o.policy?.extraBody },
    });
  }

  /** The learner's tokenizer and context decide what fits, as for the worker's own rollouts. */
  contextError(request: GenerateRequest): Promise<string | null> {
    return this.local.contextError(request);
  }

  /** The managed server's death in place of `err`, when that is why a request failed. */
  private explain(err: unknown): unknown {
    return this.o.serverFailure?.() ?? err;
  }

  async generate(requests: readonly GenerateRequest[]): Promise<Generation[]> {
    let out: Generation[];
    try {
      out = await this.chat.generate(requests);
    } catch (err) {
      throw this.explain(err);
    }
    for (const g of out) {
      if (g.tokenIds.length === 0 && g.text.length > 0)
        throw new Error(
          `the rollout server at ${this.o.baseUrl} returned no token ids; mage needs them to train on exactly what was sampled ` +
            "(vLLM: logprobs with return_tokens_as_token_ids, which mage asks for; is this a vLLM server?)",
        );
      if (g.logprobs.length !== g.tokenIds.length) g.logprobs = g.tokenIds.map(() => 0);
    }
    return out;
  }

  private async post(url: string, body: unknown): Promise<string> {
    let res: Response;
    try {
      res = await this.fetchFn(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (err) {
      throw this.explain(err);
    }
    if (!res.ok) {
      const text = (await res.text()).slice(0, 300);
      throw new Error(`rollout server: POST ${url} answered ${res.status}: ${text}`);
    }
    return res.text();
  }

  /**
   * Empties the server's prefix cache. vLLM refuses (`success: false`) while blocks are held by
   * running requests; pushes come between iterations, so that is retried briefly, then an error.
   */
  private async resetPrefixCache(): Promise<void> {
    const url = `${this.root}/reset_prefix_cache`;
    for (let attempt = 0; ; attempt++) {
      const text = await this.post(url, {});
      let ok = true;
      try {
        ok = (JSON.parse(text) as { success?: unknown }).success !== false;
      } catch {
        // Older servers answer 200 with no body: done.
      }
      if (ok) return;
      if (attempt >= 20)
        throw new Error(
          `rollout server: POST ${url} kept answering success: false (requests still running?); the new weights ` +
            "would meet keys and values cached under the old ones",
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Sends the learner's current weights to the server (see the file comment). */
  async push(tag: number): Promise<void> {
    this.pushes += 1;
    if (this.o.reload) {
      const name = `weights-${String(tag).padStart(6, "0")}-${this.pushes}`;
      const path = resolve(join(this.o.adapterDir, name));
      await this.o.learner.pushWeights(path, this.o.reload.dtype);
      await this.post(`${this.root}/collective_rpc`, { method: "mage_reload_weights", args: [path] });
      await this.resetPrefixCache();
      const previous = this.weights;
      this.weights = path;
      if (previous) await rm(previous, { recursive: true, force: true });
      return;
    }
    if (this.o.lora) {
      const name = `mage-${String(tag).padStart(6, "0")}-${this.pushes}`;
      const path = resolve(join(this.o.adapterDir, name));
      await this.o.learner.saveWeights(path);
      await this.post(`${this.root}/v1/load_lora_adapter`, { lora_name: name, lora_path: path });
      const previous = this.adapter;
      this.adapter = { name, path };
      this.chat = this.makeChat(name);
      if (previous) {
        await this.post(`${this.root}/v1/unload_lora_adapter`, { lora_name: previous.name });
        await rm(previous.path, { recursive: true, force: true });
      }
      return;
    }
    if (!this.o.weightsDir) throw new Error("model.torch.rolloutWeightsDir is required to push full weights");
    await this.o.learner.saveWeights(this.o.weightsDir);
    await this.post(`${this.root}/collective_rpc`, { method: "reload_weights" });
  }
}
