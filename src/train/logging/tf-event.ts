import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/**
 * The few fields of TensorFlow's `Event` protobuf (tensorflow/core/util/event.proto) that a
 * scalar log needs, encoded with @bufbuild/protobuf's wire writer:
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * `simple_value` is what TensorBoard's scalar dashboard reads from any writer (PyTorch's
 * SummaryWriter writes it too); it is a 32-bit float, so values are stored rounded to float32.
 */

/** The version string the first event of every file carries; readers check it. */
export const EVENT_FILE_VERSION = "brain.Event:2";

/** The first event of a file: the format version. */
export function fileVersionEvent(wallTime: number): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.Bit64).double(wallTime);
  w.tag(3, WireType.LengthDelimited).string(EVENT_FILE_VERSION);
  return w.finish();
}

/** An event holding one summary of scalar values at `step`. */
export function scalarsEvent(
  wallTime: number,
  step: number,
  scalars: readonly [string, number][],
): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.Bit64).double(wallTime);
  w.tag(2, WireType.Varint).int64(step);
  w.tag(5, WireType.LengthDelimited).fork();
  for (const [tag, value] of scalars) {
    w.tag(1, WireType.LengthDelimited).fork();
    w.tag(1, WireType.LengthDelimited).string(tag);
    // Math.fround maps a finite value beyond float32's range to ±Infinity, which the writer accepts.
    w.tag(2, WireType.Bit32).float(Math.fround(value));
    w.join();
  }
  w.join();
  return w.finish();
}
