/**
 * Durable and atomic file writes.
 *
 * `writeFileAtomic` writes into a sibling temporary file, fsyncs it, renames it over the
 * target and fsyncs the directory, so a reader (or a crash) sees either the old file or
 * the complete new one, never a torn write.
 */
import { type FileHandle, open, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

export type FileContent = string | Uint8Array | ((handle: FileHandle) => Promise<void>);

let tempCounter = 0;

/** A unique name for a sibling temporary of `path` (hidden, tagged with pid and a counter). */
export function siblingTempPath(path: string, kind = "tmp"): string {
  tempCounter += 1;
  return join(dirname(path), `.${basename(path)}.${kind}-${process.pid}-${Date.now()}-${tempCounter}`);
}

/** Writes every byte of `data` at the handle's current position. */
export async function writeAll(handle: FileHandle, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.byteLength) {
    const { bytesWritten } = await handle.write(data, off, data.byteLength - off);
    off += bytesWritten;
  }
}

/** Creates (or truncates) `path`, writes `content`, fsyncs and closes it. Not atomic by itself. */
export async function writeFileDurable(path: string, content: FileContent): Promise<void> {
  const handle = await open(path, "w");
  try {
    if (typeof content === "function") await content(handle);
    else await writeAll(handle, typeof content === "string" ? Buffer.from(content, "utf8") : content);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** fsync a directory so renames and new entries in it survive a crash (best effort where unsupported). */
export async function fsyncDir(dir: string): Promise<void> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(dir, "r");
    await handle.sync();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Some platforms/filesystems refuse to open or fsync directories; the rename is still atomic.
    if (code !== "EISDIR" && code !== "EINVAL" && code !== "EPERM" && code !== "EBADF") throw err;
  } finally {
    await handle?.close();
  }
}

/** Atomically replaces `path` with `content` (temp file + fsync + rename + directory fsync). */
export async function writeFileAtomic(path: string, content: FileContent): Promise<void> {
  const tmp = siblingTempPath(path);
  try {
    await writeFileDurable(tmp, content);
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw err;
  }
  await fsyncDir(dirname(path));
}
