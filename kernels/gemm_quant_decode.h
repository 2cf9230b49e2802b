// The block formats' decoding into registers, shared by the quantized GEMV (gemm_quant.cc)
// and its tensor-core form (gemm_quant_mma.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm_quant.h"
#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

// 32 elements decoded from their block's staging in shared memory at `blk` + `off` (2-byte
// aligned; 4-byte for fp8 and int4): the scale d and the 32 codes as f32 such that the
// weights are d * code, exactly (q for q8_0, nibble - 8 for q4_0, the E4M3 value times 2^-8
// for fp8 with d = 256 s, q - z for int4). `codes` is where an int4_g128 lane's quarter of
// the block's nibbles starts, or the 4-byte aligned word at or below a q4_0 block's nibbles
// with `sel` the prmt selector that realigns them, less `off` (unused otherwise).
struct LaneUnit {
  Reg d;
  std::vector<Reg> codes;
};
struct LaneUnitAddr {
  Reg blk, codes, sel;
};
LaneUnit DecodeLaneUnit(KernelBuilder& kb, BlockFormat f, const LaneUnitAddr& a, int64_t off);

// Where a decode reads its block's bytes: shared memory (DecodeLaneUnit), or registers
// already loaded (the tensor-core form's 16-byte reads of its staging). The decode asks for
// the scale first, then the code units in order, each once, so a reader may load them as
// they are asked for.
class BlockReader {
 public:
  virtual ~BlockReader() = default;
  // q8_0, q4_0: the f16 scale (b16); fp8: the f32 scale; int4_g128: the header word.
  virtual Reg Scale(KernelBuilder& kb) = 0;
  // Code unit i, CodeBytes() bytes in its low bits: the code bytes 2 + u i.. of a q8_0
  // block, the 4 bytes 4 + 4 i.. of an fp8 one, the nibble bytes 2 + 4 i.. of a q4_0 one,
  // and an int4_g128 quarter's code bytes 4 i...
  virtual Reg CodeUnit(KernelBuilder& kb, int i) = 0;
  virtual int CodeBytes() const { return 4; }
};
LaneUnit DecodeBlock(KernelBuilder& kb, BlockFormat f, BlockReader& r);
// A q4_0 block at `blk`: its nibble word and selector (Q4_0LaneUnitAddr(b) holds for every
// block at b + a multiple of 4 bytes).
LaneUnitAddr Q4_0LaneUnitAddr(KernelBuilder& kb, Reg blk);

}  // namespace ptxserve::kernels::gen
