/** The CRC-32C (Castagnoli) half of the `crc-32` package, which ships no types for it. */
declare module "crc-32/crc32c.js" {
  /** The signed 32-bit CRC-32C of the bytes (`>>> 0` makes it unsigned). */
  export function buf(data: Uint8Array, seed?: number): number;
}
