import { relative, resolve } from "node:path";
import { UsageError } from "../../core/errors.js";
import { loadCheckpoint } from "../../model/checkpoint.js";
import { exportHf, HF_ARCHITECTURE } from "../../model/hf-export.js";
import { parseFlags } from "../args.js";
import { checkpointArg } from "../checkpoint-arg.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage export-hf --checkpoint DIR --out DIR",
  `  Writes the embedded model of a checkpoint (or of a training run's newest checkpoint) as a Hugging Face`,
  `  ${HF_ARCHITECTURE} directory: config.json, model.safetensors (float32), tokenizer.json,`,
  "  tokenizer_config.json with the chat template, generation_config.json. Load it with",
  "  transformers' AutoModelForCausalLM.from_pretrained(DIR) or train it with `model.backend: torch`.",
  "  --out must be new, empty or an earlier export (replaced atomically).",
].join("\n");

export const command: Command = {
  name: "export-hf",
  usage: USAGE,
  async run(argv) {
    const { values } = parseFlags(argv, { checkpoint: { type: "string" }, out: { type: "string" } }, USAGE);
    if (values.checkpoint === undefined)
      throw new UsageError(`--checkpoint DIR is required\nusage: ${USAGE}`);
    if (values.out === undefined) throw new UsageError(`--out DIR is required\nusage: ${USAGE}`);
    const dir = await checkpointArg(values.checkpoint);
    if (resolve(values.out) === dir)
      throw new UsageError("--out must differ from --checkpoint (the export would replace the checkpoint)");
    const ckpt = await loadCheckpoint(dir, { trainingState: false });
    await exportHf(values.out, { config: ckpt.config, params: ckpt.params, tokenizer: ckpt.tokenizer });
    const c = ckpt.config;
    console.log(
      `wrote ${relative(process.cwd(), resolve(values.out)) || "."}: ${HF_ARCHITECTURE}, ` +
        `${c.nLayers} layers, hidden ${c.dModel}, ${c.nHeads} heads, vocabulary ${c.vocabSize}, float32`,
    );
    return 0;
  },
};
