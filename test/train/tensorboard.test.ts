import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import type { ScalarRecord } from "../../src/train/logging/scalars.js";
import { TensorBoardWriter } from "../../src/train/logging/tensorboard.js";
import { maskedCrc32c, tfRecord } from "../../src/train/logging/tfrecord.js";
import { readTensorBoard } from "./logging-helpers.js";

/** Expected (tag, step, float32 value) triples of records, in write order. */
function triples(records: readonly ScalarRecord[]): [string, number, number][] {
  return records.flatMap((r) =>
    Object.entries(r.values).map(([t, v]) => [t, r.step, Math.fround(v)] as [string, number, number]),
  );
}

describe("TensorBoard event files", () => {
  it("masks CRC-32C as TensorFlow does (values from tensorboard's own masked_crc32c)", () => {
    const bytes = (s: string) => new TextEncoder().encode(s);
    assert.equal(maskedCrc32c(bytes("123456789")), 0xc78ab0e5);
    assert.equal(maskedCrc32c(new Uint8Array(0)), 0xa282ead8);
    const length = new Uint8Array(8);
    new DataView(length.buffer).setBigUint64(0, 24n, true);
    assert.equal(maskedCrc32c(length), 0x224b7fa3);
  });

  it("frames a record as length, its CRC, the data and the data's CRC", () => {
    const data = new TextEncoder().encode("abc");
    const rec = tfRecord(data);
    const view = new DataView(rec.buffer);
    assert.equal(rec.length, 8 + 4 + 3 + 4);
    assert.equal(view.getBigUint64(0, true), 3n);
    assert.equal(view.getUint32(8, true), maskedCrc32c(rec.subarray(0, 8)));
    assert.deepEqual(rec.subarray(12, 15), data);
    assert.equal(view.getUint32(15, true), maskedCrc32c(data));
  });

  it("tensorboard's reader gets back every tag, step and value written, in order", () => {
    const dir = mkdtempSync(join(tmpdir(), "mage-tb-"));
    const replay: ScalarRecord[] = [
      {
        kind: "eval",
        step: 0,
        values: { "eval/cfr-second/final": -0.25, "eval/cfr:10-first/success@1": 0.125 },
      },
      {
        kind: "train",
        step: 0,
        values: {
          "train/loss": 0.1234567891,
          "train/final_score/mcts:100": -3.5e-7,
          "train/Ünïcode µ-Tag": 7,
        },
      },
    ];
    const live: ScalarRecord[] = [
      { kind: "train", step: 1, values: { "train/loss": 1e6 + 0.3, "train/grad_norm": 12.75 } },
      { kind: "train", step: 123_456_789_012, values: { "train/loss": -2 / 3 } },
      {
        kind: "eval",
        step: 2,
        values: { "eval/puzzle/gain_lo": Number.MIN_VALUE, "eval/puzzle/trials": 200 },
      },
    ];
    const writer = TensorBoardWriter.open(
      dir,
      replay.map((record, i) => ({ record, wallTime: 1_700_000_000 + i })),
      1_700_000_000,
    );
    for (const r of live) writer.write(r, 1_800_000_000.5);
    writer.close();

    const runs = readTensorBoard(dir);
    assert.deepEqual(Object.keys(runs), ["."]);
    const run = runs["."];
    assert.deepEqual(run.file_versions, ["brain.Event:2"]);
    const got = run.scalars.map((s) => [s.tag, s.step, s.value]);
    assert.deepEqual(got, triples([...replay, ...live]));
    assert.deepEqual(
      run.scalars.map((s) => s.wall_time),
      [1_700_000_000, 1_700_000_000, ...Array(3).fill(1_700_000_001), ...Array(5).fill(1_800_000_000.5)],
    );
    // TensorBoard's own accumulator serves the same series.
    assert.deepEqual(run.accumulator["train/loss"], [
      [0, Math.fround(0.1234567891)],
      [1, Math.fround(1e6 + 0.3)],
      [123_456_789_012, Math.fround(-2 / 3)],
    ]);
    assert.equal(Object.keys(run.accumulator).length, new Set(got.map((g) => g[0])).size);
  });

  it("a corrupted checksum is caught by the read-back", () => {
    const dir = mkdtempSync(join(tmpdir(), "mage-tb-"));
    const writer = TensorBoardWriter.open(dir, [], 1);
    writer.write({ kind: "train", step: 0, values: { "train/x": 1 } });
    writer.close();
    const file = join(dir, readdirSync(dir)[0]);
    const bytes = readFileSync(file);
    bytes[bytes.length - 1] ^= 0xff; // the last record's data CRC
    writeFileSync(file, bytes);
    assert.throws(() => readTensorBoard(dir), /a bad checksum or a torn record/);
  });

  it("opening a run folder replaces its event files with the replayed records", () => {
    const dir = mkdtempSync(join(tmpdir(), "mage-tb-"));
    const first = TensorBoardWriter.open(dir, [], 1);
    for (let step = 0; step < 5; step++) first.write({ kind: "train", step, values: { "train/x": step } });
    first.close();
    writeFileSync(join(dir, "notes.txt"), "kept");
    const kept: ScalarRecord[] = [0, 1].map((step) => ({ kind: "train", step, values: { "train/x": step } }));
    const second = TensorBoardWriter.open(
      dir,
      kept.map((record) => ({ record, wallTime: 2 })),
      2,
    );
    second.write({ kind: "train", step: 2, values: { "train/x": 20 } });
    second.close();
    assert.equal(existsSync(first.file), false);
    assert.equal(second.replaced, 1);
    assert.equal(first.replaced, 0);
    assert.ok(existsSync(join(dir, "notes.txt")));
    const run = readTensorBoard(dir)["."];
    assert.deepEqual(run.files, [second.file.split("/").pop()]);
    assert.deepEqual(
      run.scalars.map((s) => [s.step, s.value]),
      [
        [0, 0],
        [1, 1],
        [2, 20],
      ],
    );
  });
});
