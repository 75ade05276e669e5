import crc32c from "crc-32/crc32c.js";

/**
 * TFRecord framing, the container of TensorBoard's event files: each record is
 *   uint64 length (little-endian) · uint32 masked CRC-32C of those 8 bytes · data · uint32 masked CRC-32C of data.
 * The mask (TensorFlow's `crc32c::Mask`) rotates the CRC right by 15 bits and adds a constant, so a
 * CRC stored inside CRC-protected data does not checksum to a fixed value.
 */

const MASK_DELTA = 0xa282ead8;

/** TensorFlow's masked CRC-32C of `bytes`, as an unsigned 32-bit integer. */
export function maskedCrc32c(bytes: Uint8Array): number {
  const crc = crc32c.buf(bytes) >>> 0;
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + MASK_DELTA) >>> 0;
}

/** One framed record holding `data`. */
export function tfRecord(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(8 + 4 + data.length + 4);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, maskedCrc32c(out.subarray(0, 8)), true);
  out.set(data, 12);
  view.setUint32(12 + data.length, maskedCrc32c(data), true);
  return out;
}
