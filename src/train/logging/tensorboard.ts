import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import type { ScalarRecord } from "./scalars.js";
import { fileVersionEvent, scalarsEvent } from "./tf-event.js";
import { tfRecord } from "./tfrecord.js";

/**
 * A run's TensorBoard event file. The folder belongs to one run: opening it writes a new file
 * holding the run's records so far (none for a fresh run, the checkpoint's history on resume) and
 * deletes the folder's older event files, so a run resumed after a kill shows each step once
 * however far the killed process had written. Every later record is appended and written through
 * at once (one small write per iteration), so a killed run loses nothing it had logged.
 */

export interface TimedRecord {
  record: ScalarRecord;
  /** Seconds since the epoch (TensorBoard's "relative" and "wall" axes). */
  wallTime: number;
}

function encode(record: ScalarRecord, wallTime: number): Uint8Array {
  return tfRecord(scalarsEvent(wallTime, record.step, Object.entries(record.values)));
}

/** TensorBoard reads every file whose name contains "tfevents"; the writer's own names follow its convention. */
export function isEventFile(name: string): boolean {
  return name.includes("tfevents");
}

export class TensorBoardWriter {
  readonly dir: string;
  readonly file: string;
  /** How many older event files opening it replaced. */
  readonly replaced: number;
  private fd: number | null;

  private constructor(dir: string, file: string, fd: number, replaced: number) {
    this.dir = dir;
    this.file = file;
    this.fd = fd;
    this.replaced = replaced;
  }

  /** Replaces the folder's event files with one that holds `replay`; throws when the folder cannot be written. */
  static open(dir: string, replay: readonly TimedRecord[], now = Date.now() / 1000): TensorBoardWriter {
    mkdirSync(dir, { recursive: true });
    const older = readdirSync(dir).filter(isEventFile);
    let name = `events.out.tfevents.${Math.floor(now)}.mage.${process.pid}`;
    for (let n = 1; older.includes(name); n++)
      name = `events.out.tfevents.${Math.floor(now)}.mage.${process.pid}.${n}`;
    const parts = [tfRecord(fileVersionEvent(now)), ...replay.map((r) => encode(r.record, r.wallTime))];
    // Written aside under a name TensorBoard ignores, then renamed: a reader never sees half of it.
    const tmp = join(dir, `.mage-events.${process.pid}.tmp`);
    writeFileSync(tmp, Buffer.concat(parts));
    renameSync(tmp, join(dir, name));
    for (const old of older) rmSync(join(dir, old), { force: true });
    const file = join(dir, name);
    return new TensorBoardWriter(dir, file, openSync(file, "a"), older.length);
  }

  write(record: ScalarRecord, wallTime = Date.now() / 1000): void {
    if (this.fd === null) throw new Error(`TensorBoard event file ${this.file} is closed`);
    writeSync(this.fd, encode(record, wallTime));
  }

  close(): void {
    if (this.fd === null) return;
    closeSync(this.fd);
    this.fd = null;
  }
}
