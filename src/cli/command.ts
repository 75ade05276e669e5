/** One `mage` subcommand. `run` returns the process exit code. */
export interface Command {
  readonly name: string;
  readonly usage: string;
  run(argv: string[]): Promise<number>;
}
