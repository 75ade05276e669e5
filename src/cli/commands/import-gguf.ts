import { UsageError } from "../../core/errors.js";
import { runPythonModule } from "../../learner/torch/python-module.js";
import { parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage import-gguf --gguf FILE --out DIR [--f32-gguf FILE]",
  "  Writes a llama-family GGUF (llama, mistral, qwen2, qwen3; quantized or not) as a Hugging Face",
  "  directory that `model.torch.path` accepts: float32 model.safetensors, config.json,",
  "  generation_config.json, tokenizer.json and tokenizer_config.json with the chat template, and",
  "  mage-import.json (the source file and its sha256). --out must be new, empty or an earlier import",
  "  (replaced atomically). --f32-gguf also writes the dequantized weights as an F32 GGUF for",
  "  llama.cpp. Runs in the project's Python environment (node scripts/python-env.mjs).",
].join("\n");

export const command: Command = {
  name: "import-gguf",
  usage: USAGE,
  async run(argv) {
    const { values } = parseFlags(
      argv,
      { gguf: { type: "string" }, out: { type: "string" }, "f32-gguf": { type: "string" } },
      USAGE,
    );
    if (values.gguf === undefined) throw new UsageError(`--gguf FILE is required\nusage: ${USAGE}`);
    if (values.out === undefined) throw new UsageError(`--out DIR is required\nusage: ${USAGE}`);
    const args = ["--gguf", values.gguf, "--out", values.out];
    if (values["f32-gguf"] !== undefined) args.push("--f32-gguf", values["f32-gguf"]);
    const { code } = await runPythonModule("mage_learner.import_gguf", args);
    return code;
  },
};
