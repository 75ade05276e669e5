/** An error caused by what the user asked for (bad flag, bad config, unknown name). Exit code 2. */
export class UsageError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/**
 * A failure outside mage (the learner worker, an environment server) whose message already says
 * what happened and what to do: the CLI prints the message alone, without a stack trace.
 */
export class ExternalFailure extends Error {}

/** `message`, followed by the last lines a process wrote (`whose`: "the vLLM server's") when there are any. */
export function withOutputTail(message: string, whose: string, tail: readonly string[]): string {
  return tail.length > 0 ? `${message}\n--- last lines of ${whose} output ---\n${tail.join("\n")}` : message;
}

/** Throws a UsageError listing the valid choices when `value` is not one of them. */
export function expectChoice<T extends string>(what: string, value: string, choices: readonly T[]): T {
  if ((choices as readonly string[]).includes(value)) return value as T;
  throw new UsageError(`unknown ${what} "${value}"; valid choices: ${choices.join(", ")}`);
}
