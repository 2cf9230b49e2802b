// Decode rules for the warp-wide tensor-core instructions: ldmatrix and mma. Both are
// spelled with a fixed modifier sequence, so they are matched word by word instead of
// through ParseMods' categories.
#include "kernels/emu/decoder.h"

namespace ptxserve::emu {

absl::Status Decoder::Ldmatrix() {
  constexpr const char* kForms = "ldmatrix.sync.aligned.m8n8.x1/.x2/.x4[.trans][.shared].b16";
  bool sync = false, aligned = false, shape = false, trans = false, b16 = false;
  int num = 0;
  int min_ptx = 65;
  Space sp = Space::kGeneric;
  for (const std::string& m : r_.mods) {
    if (m == "sync") {
      sync = true;
    } else if (m == "aligned") {
      aligned = true;
    } else if (m == "m8n8") {
      shape = true;
    } else if ((m == "x1" || m == "x2" || m == "x4") && num == 0) {
      num = m[1] - '0';
    } else if (m == "trans") {
      trans = true;
    } else if (m == "shared" || m == "shared::cta") {
      sp = Space::kShared;
      if (m == "shared::cta") min_ptx = 78;
    } else if (m == "b16") {
      b16 = true;
    } else {
      return Err("unsupported modifier '.%s' (supported: %s)", m, kForms);
    }
  }
  if (!sync || !aligned || !shape || num == 0 || !b16) return Err("expected %s", kForms);
  if (auto s = NeedTarget(75, min_ptx); !s.ok()) return s;
  if (auto s = NeedOps(2); !s.ok()) return s;
  const RawOperand& dst = r_.ops[0];
  if (dst.kind != RawOperand::kVec || static_cast<int>(dst.elems.size()) != num) {
    return Err("a .x%d load needs a vector of %d registers", num, num);
  }
  for (int i = 0; i < num; ++i) {
    auto d = Dst(dst.elems[i], Ty::kB32);
    if (!d.ok()) return d.status();
    in_.d[i] = *d;
  }
  if (auto s = Address(r_.ops[1], sp); !s.ok()) return s;
  // Only the lanes that supply row addresses (8 per matrix) need an initialised address
  // register; the handler checks those.
  in_.nchk = 0;
  in_.space = sp;
  in_.vec = static_cast<uint8_t>(num);
  in_.fn = SelectLdmatrix(num, trans, sp == Space::kGeneric);
  return absl::OkStatus();
}

absl::Status Decoder::Mma() {
  const auto& m = r_.mods;
  const bool ok = m.size() == 9 && m[0] == "sync" && m[1] == "aligned" &&
                  (m[2] == "m16n8k16" || m[2] == "m16n8k8") && m[3] == "row" && m[4] == "col" &&
                  m[5] == "f32" && (m[6] == "f16" || m[6] == "bf16") && m[7] == m[6] &&
                  m[8] == "f32";
  if (!ok) {
    return Err(
        "supported: mma.sync.aligned.m16n8k16/.m16n8k8.row.col.f32.<ab>.<ab>.f32 with ab "
        "f16 or bf16");
  }
  const int k = m[2] == "m16n8k16" ? 16 : 8;
  const bool f16_k8 = k == 8 && m[6] == "f16";
  if (auto s = NeedTarget(f16_k8 ? 75 : 80, f16_k8 ? 65 : 70); !s.ok()) return s;
  if (auto s = NeedOps(4); !s.ok()) return s;
  // Registers per lane: D and C hold 4 f32; A holds k/4 and B k/8 packed pairs.
  const int counts[4] = {4, k / 4, k / 8, 4};
  for (int op = 0; op < 4; ++op) {
    const RawOperand& v = r_.ops[op];
    if (v.kind != RawOperand::kVec || static_cast<int>(v.elems.size()) != counts[op]) {
      return Err("operand %c needs a vector of %d registers", "dabc"[op], counts[op]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    auto d = Dst(r_.ops[0].elems[i], Ty::kF32);
    if (!d.ok()) return d.status();
    in_.d[i] = *d;
  }
  for (int i = 0; i < counts[1]; ++i) {
    auto a = Src(r_.ops[1].elems[i], Ty::kB32);
    if (!a.ok()) return a.status();
    in_.s[i] = *a;
  }
  for (int i = 0; i < counts[2]; ++i) {
    auto b = Src(r_.ops[2].elems[i], Ty::kB32);
    if (!b.ok()) return b.status();
    in_.s2[i] = *b;
  }
  for (int i = 0; i < 4; ++i) {
    auto c = Src(r_.ops[3].elems[i], Ty::kF32);
    if (!c.ok()) return c.status();
    in_.s2[2 + i] = *c;
  }
  in_.mode = static_cast<uint8_t>(k);  // for the counters' 2*16*8*k FLOPs
  in_.fn = SelectMma(k, m[6] == "bf16");
  return absl::OkStatus();
}

}  // namespace ptxserve::emu
