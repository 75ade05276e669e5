import { UsageError } from "../../core/errors.js";
import { configToYaml, loadConfig } from "../../train/config.js";
import { parseFlags } from "../args.js";
import type { Command } from "../command.js";

const USAGE = "mage config print|validate FILE [--set key=value]...";

export const command: Command = {
  name: "config",
  usage: USAGE,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      { set: { type: "string", multiple: true } },
      USAGE,
      true,
    );
    const [action, file] = positionals;
    if (action !== "print" && action !== "validate") {
      throw new UsageError(
        `unknown action "${action ?? ""}"; valid choices: print, validate\nusage: ${USAGE}`,
      );
    }
    if (!file || positionals.length !== 2) throw new UsageError(`expected one config file\nusage: ${USAGE}`);
    const config = loadConfig(file, values.set ?? []);
    if (action === "print") process.stdout.write(configToYaml(config));
    else console.log(`${file}: valid (${config.game}, ${config.train.iterations} iterations)`);
    return 0;
  },
};
