/** Calls `onLine` with each line a child process's output stream writes (the last one even without a newline). */
export function forEachLine(stream: NodeJS.ReadableStream | null, onLine: (line: string) => void): void {
  if (!stream) return;
  let partial = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    partial += chunk;
    const lines = partial.split("\n");
    partial = lines.pop() ?? "";
    for (const l of lines) onLine(l);
  });
  stream.on("end", () => {
    if (partial) onLine(partial);
    partial = "";
  });
}
