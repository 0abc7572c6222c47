// A streaming read of memory, the memory-bandwidth probe's kernel: every byte of a buffer is loaded
// once, with SIMD, and folded into a checksum so the loads cannot be optimised away.
#pragma once

#include <cstddef>
#include <cstdint>

namespace squeezekv {

// Sum of the buffer's 64-bit words (wrapping), then of its trailing bytes. Any alignment.
uint64_t stream_read(const void* data, size_t bytes);
uint64_t stream_read_scalar(const void* data, size_t bytes);

}  // namespace squeezekv
