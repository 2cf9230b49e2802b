// PTX module parser: directives, .entry signatures, register/shared declarations, labels
// and instructions into RawInstr (registers resolved through lexical scopes), then each
// function is decoded (decode.cc). Anything not understood is an error naming the line.
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/emu/lexer.h"
#include "kernels/emu/parse_types.h"

namespace ptxserve::emu {

absl::StatusOr<uint16_t> FnBuilder::NewSlot(std::string name) {
  if (fn->num_slots >= 65000) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("function %s needs more than 65000 register slots", fn->name));
  }
  fn->slot_names.push_back(std::move(name));
  return static_cast<uint16_t>(fn->num_slots++);
}

absl::StatusOr<uint16_t> FnBuilder::ConstSlot(uint64_t bits) {
  auto it = const_slots.find(bits);
  if (it != const_slots.end()) return it->second;
  auto slot = NewSlot(absl::StrFormat("0x%x", bits));
  if (!slot.ok()) return slot.status();
  const_slots[bits] = *slot;
  fn->consts.emplace_back(*slot, bits);
  return *slot;
}

absl::StatusOr<uint16_t> FnBuilder::SpecialSlot(Special s) {
  auto it = special_slots.find(static_cast<uint8_t>(s));
  if (it != special_slots.end()) return it->second;
  auto slot = NewSlot("%special");
  if (!slot.ok()) return slot.status();
  special_slots[static_cast<uint8_t>(s)] = *slot;
  fn->specials.emplace_back(*slot, s);
  return *slot;
}

absl::StatusOr<uint16_t> FnBuilder::SinkSlot() {
  if (sink_slot == UINT16_MAX) {
    auto slot = NewSlot("_");
    if (!slot.ok()) return slot.status();
    sink_slot = *slot;
  }
  return sink_slot;
}

absl::StatusOr<uint32_t> FnBuilder::SharedAddress(const std::string& name) {
  auto it = shared_offset.find(name);
  if (it != shared_offset.end()) return it->second;
  const SharedVar* v = nullptr;
  if (auto l = local_shared.find(name); l != local_shared.end()) {
    v = &l->second;
  } else if (module_shared != nullptr) {
    if (auto m = module_shared->find(name); m != module_shared->end()) v = &m->second;
  }
  if (v == nullptr) return absl::NotFoundError(name);
  uint32_t off;
  if (v->is_extern) {
    fn->uses_dynamic_shared = true;
    off = fn->dynamic_offset;  // fixed by DecodeFunction once every static variable is placed
  } else {
    const uint32_t a = std::max<uint32_t>(v->align, 1);
    off = (fn->static_shared + a - 1) / a * a;
    fn->static_shared = off + v->size;
  }
  shared_offset[name] = off;
  return off;
}

absl::StatusOr<uint32_t> FnBuilder::LocalAddress(const std::string& name) {
  auto it = local_offset.find(name);
  if (it != local_offset.end()) return it->second;
  auto v = local_vars.find(name);
  if (v == local_vars.end()) return absl::NotFoundError(name);
  const uint32_t a = std::max<uint32_t>(v->second.align, 1);
  const uint32_t off = (fn->local_bytes + a - 1) / a * a;
  fn->local_bytes = off + v->second.size;
  local_offset[name] = off;
  return off;
}

namespace {

bool ParseTyName(std::string_view s, Ty* t) {
  static const std::pair<const char*, Ty> kTypes[] = {
      {"pred", Ty::kPred}, {"b8", Ty::kB8},         {"b16", Ty::kB16}, {"b32", Ty::kB32},
      {"b64", Ty::kB64},   {"b128", Ty::kB128},     {"u8", Ty::kU8},   {"u16", Ty::kU16},
      {"u32", Ty::kU32},   {"u64", Ty::kU64},       {"s8", Ty::kS8},   {"s16", Ty::kS16},
      {"s32", Ty::kS32},   {"s64", Ty::kS64},       {"f16", Ty::kF16}, {"f16x2", Ty::kF16x2},
      {"bf16", Ty::kBF16}, {"bf16x2", Ty::kBF16x2}, {"f32", Ty::kF32}, {"f64", Ty::kF64},
  };
  for (const auto& [name, ty] : kTypes) {
    if (s == name) {
      *t = ty;
      return true;
    }
  }
  return false;
}

bool IsSpecialBase(std::string_view s) {
  return s == "%tid" || s == "%ntid" || s == "%ctaid" || s == "%nctaid";
}
bool IsScalarSpecial(std::string_view s) {
  static const char* kNames[] = {
      "%laneid",      "%warpid",      "%nwarpid",           "%smid",
      "%nsmid",       "%gridid",      "%lanemask_eq",       "%lanemask_le",
      "%lanemask_lt", "%lanemask_ge", "%lanemask_gt",       "%clock",
      "%clock64",     "%globaltimer", "%dynamic_smem_size", "%total_smem_size"};
  for (const char* n : kNames) {
    if (s == n) return true;
  }
  return false;
}

class Parser {
 public:
  Parser(std::vector<Token> toks, Module* mod) : t_(std::move(toks)), mod_(mod) {}

  absl::Status Run() {
    while (Peek().kind != Tok::kEnd) {
      const Token& tok = Peek();
      if (tok.kind != Tok::kDot) return Err(tok, "expected a directive");
      const std::string_view d = tok.text;
      if (d == "version") {
        Next();
        const Token& v = Next();
        int maj = 0, min = 0;
        const size_t dot = v.text.find('.');
        if ((v.kind != Tok::kFloat && v.kind != Tok::kInt) || dot == std::string_view::npos ||
            !absl::SimpleAtoi(std::string(v.text.substr(0, dot)), &maj) ||
            !absl::SimpleAtoi(std::string(v.text.substr(dot + 1)), &min)) {
          return Err(v, "expected a version such as 8.0 after .version");
        }
        mod_->version_major = maj;
        mod_->version_minor = min;
      } else if (d == "target") {
        Next();
        const Token& tg = Next();
        if (tg.kind != Tok::kIdent) return Err(tg, "expected a target such as sm_80");
        mod_->target = std::string(tg.text);
        while (IsPunct(Peek(), ',')) {
          Next();
          Next();  // texmode_*, debug: irrelevant to execution
        }
      } else if (d == "address_size") {
        Next();
        const Token& a = Next();
        if (a.kind != Tok::kInt || a.ival != 64) {
          return Err(a, "only .address_size 64 is supported");
        }
      } else if (d == "file" || d == "loc") {
        SkipLine();
      } else if (d == "pragma") {
        if (auto s = SkipPast(';'); !s.ok()) return s;
      } else if (d == "section") {
        if (auto s = SkipSection(); !s.ok()) return s;
      } else if (d == "visible" || d == "weak" || d == "extern" || d == "entry" || d == "shared" ||
                 d == "func" || d == "global" || d == "const") {
        if (auto s = ParseDeclaration(); !s.ok()) return s;
      } else {
        return Err(tok, absl::StrCat("unsupported module directive .", std::string(d)));
      }
    }
    return absl::OkStatus();
  }

 private:
  const Token& Peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  const Token& Next() {
    const Token& tok = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return tok;
  }
  static bool IsPunct(const Token& t, char c) { return t.kind == Tok::kPunct && t.text[0] == c; }
  static bool IsDot(const Token& t, std::string_view s) {
    return t.kind == Tok::kDot && t.text == s;
  }
  static absl::Status Err(const Token& t, std::string_view what) {
    std::string near =
        t.kind == Tok::kEnd ? "end of input" : absl::StrCat("'", std::string(t.text), "'");
    if (t.kind == Tok::kDot) near = absl::StrCat("'.", std::string(t.text), "'");
    return absl::InvalidArgumentError(
        absl::StrFormat("PTX line %d: %s (near %s)", t.line, what, near));
  }
  absl::Status Expect(char c) {
    const Token& t = Next();
    if (!IsPunct(t, c)) return Err(t, absl::StrFormat("expected '%c'", c));
    return absl::OkStatus();
  }
  void SkipLine() {
    const int32_t line = Next().line;
    while (Peek().kind != Tok::kEnd && Peek().line == line) Next();
  }
  absl::Status SkipPast(char c) {
    while (Peek().kind != Tok::kEnd && !IsPunct(Peek(), c)) Next();
    return Expect(c);
  }
  absl::Status SkipSection() {
    Next();
    while (Peek().kind != Tok::kEnd && !IsPunct(Peek(), '{')) Next();
    if (auto s = Expect('{'); !s.ok()) return s;
    int depth = 1;
    while (depth > 0) {
      const Token& t = Next();
      if (t.kind == Tok::kEnd) return Err(t, "unterminated .section");
      if (IsPunct(t, '{')) ++depth;
      if (IsPunct(t, '}')) --depth;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ExpectInt(std::string_view what) {
    const Token& t = Next();
    if (t.kind != Tok::kInt) return Err(t, absl::StrCat("expected an integer ", std::string(what)));
    return t.ival;
  }

  // [.align N] .type name [ '[' N? ']' ] ;  (after .shared / .extern .shared)
  absl::Status ParseSharedVar(bool is_extern, absl::flat_hash_map<std::string, SharedVar>* into) {
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
      } else if (ParseTyName(t.text, &ty) && ty != Ty::kPred) {
      } else {
        return Err(t, "unsupported attribute in .shared declaration");
      }
    }
    if (ty == Ty::kNone) return Err(Peek(), "missing type in .shared declaration");
    const Token& name = Next();
    if (name.kind != Tok::kIdent) return Err(name, "expected a .shared variable name");
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
    if (bytes > (1u << 30)) return Err(name, "shared variable too large");
    v.size = static_cast<uint32_t>(bytes);
    (*into)[std::string(name.text)] = v;
    return Expect(';');
  }

  absl::Status ParseDeclaration() {
    bool is_extern = false;
    while (IsDot(Peek(), "visible") || IsDot(Peek(), "weak") || IsDot(Peek(), "extern")) {
      if (Next().text == "extern") is_extern = true;
    }
    const Token& kw = Next();
    if (IsDot(kw, "shared")) return ParseSharedVar(is_extern, &module_shared_);
    if (IsDot(kw, "entry")) return ParseEntry();
    if (IsDot(kw, "func")) return Err(kw, "device functions (.func) are not supported");
    return Err(kw, "unsupported module-scope declaration (only .entry and .shared)");
  }

  absl::Status ParseParams(FnBuilder& b) {
    Function& fn = *b.fn;
    if (auto s = Expect('('); !s.ok()) return s;
    if (IsPunct(Peek(), ')')) {
      Next();
      return absl::OkStatus();
    }
    while (true) {
      const Token& p = Next();
      if (!IsDot(p, "param")) return Err(p, "expected .param");
      ParamInfo info;
      Ty ty = Ty::kNone;
      bool after_ptr = false;
      while (Peek().kind == Tok::kDot) {
        const Token& t = Next();
        Ty tt;
        if (t.text == "align") {
          auto a = ExpectInt("after .align");
          if (!a.ok()) return a.status();
          if (!after_ptr) info.align = static_cast<uint32_t>(*a);  // .ptr .align: pointee's
        } else if (t.text == "ptr") {
          after_ptr = true;
        } else if (after_ptr && (t.text == "global" || t.text == "shared" || t.text == "const" ||
                                 t.text == "local")) {
        } else if (ParseTyName(t.text, &tt) && tt != Ty::kPred) {
          ty = tt;
        } else {
          return Err(t, "unsupported attribute in .param declaration");
        }
      }
      if (ty == Ty::kNone) return Err(Peek(), "missing type in .param declaration");
      const Token& name = Next();
      if (name.kind != Tok::kIdent) return Err(name, "expected a parameter name");
      uint64_t count = 1;
      if (IsPunct(Peek(), '[')) {
        Next();
        auto c = ExpectInt("array size");
        if (!c.ok()) return c.status();
        count = *c;
        if (auto s = Expect(']'); !s.ok()) return s;
      }
      info.name = std::string(name.text);
      info.size = static_cast<uint32_t>(count * TySize(ty));
      info.align = std::max<uint32_t>(info.align, TySize(ty));
      fn.param_bytes = (fn.param_bytes + info.align - 1) / info.align * info.align;
      info.offset = fn.param_bytes;
      fn.param_bytes += info.size;
      if (b.params.contains(info.name)) return Err(name, "duplicate parameter name");
      b.params[info.name] = static_cast<uint32_t>(fn.params.size());
      fn.params.push_back(std::move(info));
      if (IsPunct(Peek(), ',')) {
        Next();
        continue;
      }
      return Expect(')');
    }
  }

  absl::Status ParseDims(Dim3u* d) {
    uint32_t v[3] = {1, 1, 1};
    for (int i = 0; i < 3; ++i) {
      auto x = ExpectInt("dimension");
      if (!x.ok()) return x.status();
      v[i] = static_cast<uint32_t>(*x);
      if (!IsPunct(Peek(), ',')) break;
      Next();
    }
    *d = Dim3u{v[0], v[1], v[2]};
    return absl::OkStatus();
  }

  absl::Status ParseEntry() {
    const Token& name = Next();
    if (name.kind != Tok::kIdent) return Err(name, "expected a kernel name after .entry");
    auto fn = std::make_unique<Function>();
    fn->name = std::string(name.text);
    fn->line = name.line;
    if (mod_->Find(fn->name) != nullptr) return Err(name, "duplicate .entry");
    FnBuilder b;
    b.fn = fn.get();
    b.module_shared = &module_shared_;
    if (auto s = ParseParams(b); !s.ok()) return s;
    while (Peek().kind == Tok::kDot) {
      const Token& t = Next();
      if (t.text == "maxntid" || t.text == "reqntid") {
        if (auto s = ParseDims(t.text == "maxntid" ? &fn->maxntid : &fn->reqntid); !s.ok()) {
          return s;
        }
      } else if (t.text == "minnctapersm" || t.text == "maxnreg" || t.text == "maxnctapersm") {
        if (auto x = ExpectInt("value"); !x.ok()) return x.status();
      } else if (t.text == "noreturn") {
      } else if (t.text == "pragma") {
        if (auto s = SkipPast(';'); !s.ok()) return s;
      } else {
        return Err(t, "unsupported .entry attribute");
      }
    }
    if (IsPunct(Peek(), ';')) {  // a declaration without a body
      Next();
      return absl::OkStatus();
    }
    if (auto s = ParseBody(b); !s.ok()) return s;
    if (auto s = DecodeFunction(b); !s.ok()) return s;
    mod_->functions.push_back(std::move(fn));
    return absl::OkStatus();
  }

  const RegRef* Lookup(std::string_view name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(std::string(name));
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  absl::Status Declare(FnBuilder& b, const Token& at, std::string name, Ty ty) {
    if (scopes_.back().contains(name)) {
      return Err(at, absl::StrCat("register ", name, " declared twice"));
    }
    RegRef r;
    r.type = ty;
    if (ty == Ty::kPred) {
      r.pred = true;
      if (b.fn->num_preds >= 65000) return Err(at, "too many predicate registers");
      r.index = static_cast<uint16_t>(b.fn->num_preds++);
      b.fn->pred_names.push_back(name);
    } else {
      auto slot = b.NewSlot(name);
      if (!slot.ok()) return slot.status();
      r.index = *slot;
    }
    scopes_.back()[std::move(name)] = r;
    return absl::OkStatus();
  }

  absl::Status ParseRegDecl(FnBuilder& b) {
    Ty ty = Ty::kNone;
    while (Peek().kind == Tok::kDot) {
      const Token& t = Next();
      if (!ParseTyName(t.text, &ty) || ty == Ty::kB128) {
        return Err(t, "unsupported register type");
      }
    }
    if (ty == Ty::kNone) return Err(Peek(), "missing type in .reg declaration");
    while (true) {
      const Token& name = Next();
      if (name.kind != Tok::kIdent) return Err(name, "expected a register name");
      if (IsPunct(Peek(), '<')) {
        Next();
        auto n = ExpectInt("register count");
        if (!n.ok()) return n.status();
        if (*n > 100000) return Err(name, "register range too large");
        if (auto s = Expect('>'); !s.ok()) return s;
        for (uint64_t i = 0; i < *n; ++i) {
          if (auto s = Declare(b, name, absl::StrCat(std::string(name.text), i), ty); !s.ok())
            return s;
        }
      } else {
        if (auto s = Declare(b, name, std::string(name.text), ty); !s.ok()) return s;
      }
      if (IsPunct(Peek(), ',')) {
        Next();
        continue;
      }
      return Expect(';');
    }
  }

  absl::Status ParseBody(FnBuilder& b) {
    if (auto s = Expect('{'); !s.ok()) return s;
    scopes_.clear();
    scopes_.emplace_back();
    while (true) {
      const Token& t = Peek();
      if (t.kind == Tok::kEnd) return Err(t, "unterminated function body");
      if (IsPunct(t, '}')) {
        Next();
        scopes_.pop_back();
        if (scopes_.empty()) return absl::OkStatus();
        continue;
      }
      if (IsPunct(t, '{')) {
        Next();
        scopes_.emplace_back();
        continue;
      }
      if (t.kind == Tok::kDot) {
        Next();
        if (t.text == "reg") {
          if (auto s = ParseRegDecl(b); !s.ok()) return s;
        } else if (t.text == "shared") {
          if (auto s = ParseSharedVar(false, &b.local_shared); !s.ok()) return s;
        } else if (t.text == "local") {
          if (auto s = ParseSharedVar(false, &b.local_vars); !s.ok()) return s;
        } else if (t.text == "pragma") {
          if (auto s = SkipPast(';'); !s.ok()) return s;
        } else if (t.text == "loc") {
          pos_--;
          SkipLine();
        } else {
          return Err(t, "unsupported directive in function body");
        }
        continue;
      }
      if (t.kind == Tok::kIdent && IsPunct(Peek(1), ':')) {
        const std::string label(t.text);
        if (b.labels.contains(label)) return Err(t, "duplicate label");
        b.labels[label] = static_cast<uint32_t>(b.raw.size());
        Next();
        Next();
        continue;
      }
      RawInstr ri;
      if (auto s = ParseInstr(&ri); !s.ok()) return s;
      b.raw.push_back(std::move(ri));
    }
  }

  absl::Status ParseInstr(RawInstr* ri) {
    if (IsPunct(Peek(), '@')) {
      Next();
      if (IsPunct(Peek(), '!')) {
        Next();
        ri->guard_neg = true;
      }
      const Token& g = Next();
      const RegRef* r = g.kind == Tok::kIdent ? Lookup(g.text) : nullptr;
      if (r == nullptr || !r->pred) return Err(g, "guard must be a declared .pred register");
      ri->has_guard = true;
      ri->guard = *r;
    }
    const Token& op = Next();
    if (op.kind != Tok::kIdent) return Err(op, "expected an instruction");
    ri->line = op.line;
    ri->opcode = std::string(op.text);
    while (Peek().kind == Tok::kDot) ri->mods.emplace_back(Next().text);
    if (IsPunct(Peek(), ';')) {
      Next();
      return absl::OkStatus();
    }
    while (true) {
      RawOperand o;
      if (auto s = ParseOperand(&o, true); !s.ok()) return s;
      ri->ops.push_back(std::move(o));
      const Token& sep = Next();
      if (IsPunct(sep, ';')) return absl::OkStatus();
      if (!IsPunct(sep, ',')) return Err(sep, "expected ',' or ';' after an operand");
    }
  }

  absl::Status ParseSigned(RawOperand* o) {
    bool neg = false;
    while (IsPunct(Peek(), '-') || IsPunct(Peek(), '+')) neg ^= Next().text[0] == '-';
    const Token& t = Next();
    if (t.kind == Tok::kInt) {
      o->kind = RawOperand::kInt;
      o->ival = neg ? (~t.ival + 1) : t.ival;
    } else if (t.kind == Tok::kFloat) {
      o->kind = RawOperand::kFloat;
      o->fbits = t.fbits;
      o->f32_bits = t.f32_bits;
      if (neg) o->fbits ^= t.f32_bits ? 0x80000000ull : 0x8000000000000000ull;
    } else {
      return Err(t, "expected a number");
    }
    return absl::OkStatus();
  }

  absl::Status ParseOperand(RawOperand* o, bool allow_compound) {
    const Token& t = Peek();
    if (allow_compound && IsPunct(t, '[')) {
      Next();
      o->kind = RawOperand::kAddr;
      const Token& base = Peek();
      if (base.kind == Tok::kIdent) {
        Next();
        const RegRef* r = Lookup(base.text);
        if (r != nullptr) {
          if (r->pred) return Err(base, "predicate used as an address");
          o->addr_reg = true;
          o->reg = *r;
        } else if (base.text[0] == '%') {
          return Err(base, "undeclared register");
        } else {
          o->name = std::string(base.text);
        }
        if (IsPunct(Peek(), '+')) {  // [base+imm] or [base+-imm]; ptxas rejects [base-imm]
          Next();
          RawOperand off;
          if (auto s = ParseSigned(&off); !s.ok()) return s;
          if (off.kind != RawOperand::kInt) return Err(Peek(), "address offset must be integer");
          o->offset = static_cast<int64_t>(off.ival);
        }
      } else {
        RawOperand abs;
        if (auto s = ParseSigned(&abs); !s.ok()) return s;
        if (abs.kind != RawOperand::kInt) return Err(base, "address must be integer");
        o->offset = static_cast<int64_t>(abs.ival);
      }
      return Expect(']');
    }
    if (allow_compound && IsPunct(t, '{')) {
      Next();
      o->kind = RawOperand::kVec;
      while (true) {
        RawOperand e;
        if (auto s = ParseOperand(&e, false); !s.ok()) return s;
        o->elems.push_back(std::move(e));
        const Token& sep = Next();
        if (IsPunct(sep, '}')) return absl::OkStatus();
        if (!IsPunct(sep, ',')) return Err(sep, "expected ',' or '}' in a vector operand");
      }
    }
    if (IsPunct(t, '!')) {
      Next();
      const Token& p = Next();
      const RegRef* r = p.kind == Tok::kIdent ? Lookup(p.text) : nullptr;
      if (r == nullptr || !r->pred) return Err(p, "'!' must be followed by a .pred register");
      o->kind = RawOperand::kReg;
      o->reg = *r;
      o->neg = true;
      return absl::OkStatus();
    }
    if (t.kind == Tok::kIdent) {
      Next();
      if (t.text == "_") {
        o->kind = RawOperand::kSink;
        return absl::OkStatus();
      }
      if (const RegRef* r = Lookup(t.text); r != nullptr) {
        o->kind = RawOperand::kReg;
        o->reg = *r;
        if (IsPunct(Peek(), '|')) {
          Next();
          const Token& q = Next();
          const RegRef* r2 = q.kind == Tok::kIdent ? Lookup(q.text) : nullptr;
          if (r2 == nullptr) return Err(q, "expected a register after '|'");
          o->has_reg2 = true;
          o->reg2 = *r2;
        }
        return absl::OkStatus();
      }
      if (IsSpecialBase(t.text)) {
        const Token& c = Next();
        if (c.kind != Tok::kDot || (c.text != "x" && c.text != "y" && c.text != "z")) {
          return Err(c, absl::StrCat(std::string(t.text), " needs a .x, .y or .z component"));
        }
        o->kind = RawOperand::kSpecial;
        o->name = absl::StrCat(std::string(t.text), ".", std::string(c.text));
        return absl::OkStatus();
      }
      if (IsScalarSpecial(t.text)) {
        o->kind = RawOperand::kSpecial;
        o->name = std::string(t.text);
        return absl::OkStatus();
      }
      if (t.text[0] == '%') return Err(t, "undeclared register");
      o->kind = RawOperand::kSym;
      o->name = std::string(t.text);
      return absl::OkStatus();
    }
    return ParseSigned(o);
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  Module* mod_;
  absl::flat_hash_map<std::string, SharedVar> module_shared_;
  std::vector<absl::flat_hash_map<std::string, RegRef>> scopes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> ParseModule(std::string_view text) {
  auto toks = Lex(text);
  if (!toks.ok()) return toks.status();
  auto mod = std::make_unique<Module>();
  Parser p(std::move(*toks), mod.get());
  if (auto s = p.Run(); !s.ok()) return s;
  if (mod->version_major == 0) return absl::InvalidArgumentError("PTX: missing .version");
  if (mod->target.empty()) return absl::InvalidArgumentError("PTX: missing .target");
  return mod;
}

}  // namespace ptxserve::emu
