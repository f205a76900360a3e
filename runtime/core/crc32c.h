// runtime/core/crc32c.h — CRC-32C (Castagnoli): the checksum of checkpoint segments, token shards and
// offloaded optimizer chunks.
//
// Same polynomial and conventions as iSCSI / RocksDB / ext4 (reflected 0x82F63B78, initial and
// final XOR 0xffffffff): Crc32c("123456789") == 0xE3069283. Uses the SSE4.2 crc32 instruction
// (part of the x86-64-v3 baseline this project builds for) with three interleaved streams, so
// checksumming runs far faster than the disk; a table-driven fallback gives the same values.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// CRC of data[0, n). Extend a running CRC by passing the previous result as `crc`:
// Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a ++ b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The two implementations Crc32c dispatches between, exposed so tests can compare them and
// benchmarks can time them. Crc32cPortable (slicing-by-8 tables) runs anywhere;
// Crc32cHardwareAvailable says whether this CPU has the SSE4.2 instruction Crc32c then uses.
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);
bool Crc32cHardwareAvailable();

}  // namespace tessera
