import { command as pretrainCommand } from "../../src/cli/commands/pretrain.js";

/** `mage pretrain ARGV` with its stdout and stderr captured. */
export async function runPretrainCaptured(argv: string[]): Promise<{ out: string; err: string }> {
  const write = process.stdout.write.bind(process.stdout);
  const writeErr = process.stderr.write.bind(process.stderr);
  let out = "";
  let err = "";
  process.stdout.write = ((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  }) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => {
    err += String(chunk);
    return true;
  }) as typeof process.stderr.write;
  try {
    await pretrainCommand.run(argv);
  } finally {
    process.stdout.write = write;
    process.stderr.write = writeErr;
  }
  return { out, err };
}
