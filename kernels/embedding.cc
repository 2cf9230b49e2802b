#include "kernels/embedding.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// Elements per block of every format the gather decodes (GGML's q8_0 and q4_0).
constexpr int kBlockElems = 32;

// Elements per thread step: up to a 128-bit table load dividing dim, or a whole block.
int Vec(const EmbeddingConfig& c) {
  if (c.blocks) return kBlockElems;
  int v = 16 / ElemSize(c.table_dtype);
  while (c.dim % v != 0) v /= 2;
  return v;
}

// Code bytes of the block at `blk` two at a time, as u32 words: a block row is only 2-byte
// aligned (34 and 18 bytes per block), so a u16 is the widest load every block allows.
Reg CodeWord(KernelBuilder& kb, Reg blk, int64_t offset) {
  return kb.Cvt(Type::kU32, Type::kU16,
                kb.Ld1(Space::kGlobal, Type::kU16, Operand::Addr(blk, offset)), Round::kNone);
}

// Per format: the integer codes of one block (code bytes from byte 2 on, after the f16
// scale), each as an exact f32, in element order. Another block format is one more such
// helper, a case in Decodes and DecodeBlock, and its block size in kBlockElems' place.
std::vector<Reg> CodesQ8_0(KernelBuilder& kb, Reg blk) {
  std::vector<Reg> q(kBlockElems);
  for (int i = 0; i < kBlockElems / 2; ++i) {
    const Reg w = CodeWord(kb, blk, 2 + 2 * i);
    for (int byte = 0; byte < 2; ++byte) {
      const Reg s = kb.Emit(Op::kBfe, Type::kS32, {w, 8 * byte, 8});  // sign-extended int8
      q[2 * i + byte] = kb.Cvt(Type::kF32, Type::kS32, s, Round::kRn);
    }
  }
  return q;
}
// q4_0: byte j holds element j in its low nibble and element j + 16 in its high one; the
// code is nibble - 8.
std::vector<Reg> CodesQ4_0(KernelBuilder& kb, Reg blk) {
  std::vector<Reg> q(kBlockElems);
  for (int i = 0; i < kBlockElems / 4; ++i) {
    const Reg w = CodeWord(kb, blk, 2 + 2 * i);  // bytes 2i and 2i + 1
    for (int byte = 0; byte < 2; ++byte) {
      for (int hi = 0; hi < 2; ++hi) {
        const Reg nib = kb.Emit(Op::kBfe, Type::kU32, {w, 8 * byte + 4 * hi, 4});
        const Reg c = kb.Emit(Op::kSub, Type::kS32, {nib, 8});
        q[2 * i + byte + 16 * hi] = kb.Cvt(Type::kF32, Type::kS32, c, Round::kRn);
      }
    }
  }
  return q;
}

// The formats the gather decodes; any other is refused by the Config's check.
bool Decodes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0:
    case BlockFormat::kQ4_0:
      return true;
    case BlockFormat::kFp8E4M3:  // no checkpoint of ours quantizes its embedding to these
    case BlockFormat::kInt4G128:
      return false;
  }
  return false;
}

// One block decoded to f32: d * code, as DequantizeRow computes it. d is an f16 and a code
// at most 8 bits, so the product is exact and its rounding mode does not matter.
std::vector<Reg> DecodeBlock(KernelBuilder& kb, BlockFormat f, Reg blk) {
  const Reg d =
      kb.Cvt(Type::kF32, Type::kF16, kb.Ld1(Space::kGlobal, Type::kB16, Operand::Addr(blk, 0)));
  std::vector<Reg> v;
  switch (f) {
    case BlockFormat::kQ8_0:
      v = CodesQ8_0(kb, blk);
      break;
    case BlockFormat::kQ4_0:
      v = CodesQ4_0(kb, blk);
      break;
    case BlockFormat::kFp8E4M3:  // refused by Decodes before any code is generated
    case BlockFormat::kInt4G128:
      break;
  }
  for (Reg& r : v) r = gen::FMul(kb, d, r);
  return v;
}

}  // namespace

int EmbeddingConfig::Threads() const {
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(dim / Vec(*this), 32) * 32, 32, 256));
}

absl::Status EmbeddingConfig::CheckAcrossFields() const {
  if (blocks && !Decodes(block_format)) {
    return absl::InvalidArgumentError(absl::StrCat("block_format = ", BlockFormatName(block_format),
                                                   ": the gather decodes q8_0 and q4_0"));
  }
  if (blocks && dim % kBlockElems != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim = ", dim, ": a ", BlockFormatName(block_format),
                     " table's rows are whole blocks of ", kBlockElems, " elements"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GenerateEmbedding(const EmbeddingConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int vec = Vec(cfg);
    // Bytes of one thread step in the table: a vector of elements or one block.
    const int64_t unit =
        cfg.blocks ? BlockBytes(cfg.block_format) : int64_t{vec} * ElemSize(cfg.table_dtype);
    const int64_t nvec = cfg.dim / vec;
    const auto [table, ids, out, num_tokens, vocab] = DeclareParams<EmbeddingArgs>(kb);

    const auto [t, done] = gen::EnterRow(kb, num_tokens);
    const Reg id = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, ids, t, 4)));
    // One unsigned compare rejects negative ids too.
    const Reg valid = kb.Setp(Cmp::kLt, Type::kU32, id, vocab);
    const Reg row = gen::AddrAdd(kb, table, kb.Selp(Type::kU32, id, 0, valid), nvec * unit);
    const Reg dst_row = gen::AddrAdd(kb, out, t, int64_t{cfg.dim} * 4);
    const Reg i = kb.Special(SReg::kTidX);
    const Reg step = kb.Special(SReg::kNtidX);
    const ptx::Label loop = kb.NewLabel("loop");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, nvec), done);
    kb.Bind(loop);
    {
      const Reg src = gen::AddrAdd(kb, row, i, unit);
      std::vector<Reg> v =
          cfg.blocks ? DecodeBlock(kb, cfg.block_format, src)
                     : gen::LoadAsF32(kb, cfg.table_dtype, src, 0, vec, static_cast<int>(unit));
      for (Reg& r : v) r = kb.Selp(Type::kF32, r, Operand::F32(0.0f), valid);
      gen::StoreFromF32(kb, ElemType::kF32, gen::AddrAdd(kb, dst_row, i, int64_t{vec} * 4), 0, v,
                        vec * 4);
    }
    kb.EmitTo(i, Op::kAdd, Type::kU32, {i, step});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, nvec), loop);
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
