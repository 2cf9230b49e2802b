#include "kernels/emu/token_stream.h"

namespace ptxserve::emu {

absl::Status TokenStream::ParseVarDecl(bool is_extern,
                                       absl::flat_hash_map<std::string, SharedVar>* into) {
  SharedVar v;
  v.is_extern = is_extern;
  Ty ty = Ty::kNone;
  while (Peek().kind == Tok::kDot) {
    const Token& t = Next();
    if (t.text == "align") {
      auto a = ExpectInt("after .align");
      if (!a.ok()) return a.status();
      if (*a == 0 || (*a & (*a - 1)) != 0) return Err(t, ".align must be a power of two");
      v.align = static_cast<uint32_t>(*a);
    } else if (ParseTy(t.text, &ty) && ty != Ty::kPred) {
    } else {
      return Err(t, "unsupported attribute in variable declaration");
    }
  }
  if (ty == Ty::kNone) return Err(Peek(), "missing type in variable declaration");
  const Token& name = Next();
  if (name.kind != Tok::kIdent) return Err(name, "expected a variable name");
  uint64_t count = 1;
  if (IsPunct(Peek(), '[')) {
    Next();
    if (IsPunct(Peek(), ']')) {
      if (!is_extern) return Err(name, "array without size must be .extern");
      count = 0;
    } else {
      auto c = ExpectInt("array size");
      if (!c.ok()) return c.status();
      count = *c;
    }
    if (auto s = Expect(']'); !s.ok()) return s;
  } else if (is_extern) {
    count = 0;
  }
  if (v.align < static_cast<uint32_t>(TySize(ty))) v.align = TySize(ty);
  const uint64_t bytes = count * TySize(ty);
  if (bytes > (1u << 30)) return Err(name, "variable too large");
  v.size = static_cast<uint32_t>(bytes);
  (*into)[std::string(name.text)] = v;
  return Expect(';');
}

}  // namespace ptxserve::emu
