// Function bodies: register declarations (ranges like %r<12>, nested scopes that shadow),
// .shared/.local variables, labels, and instructions with guards and operands.
#include <string>
#include <utility>

#include "kernels/emu/token_stream.h"

namespace ptxserve::emu {
namespace {

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

class BodyParser {
 public:
  BodyParser(TokenStream& ts, FnBuilder& b) : ts_(ts), b_(b) {}
  absl::Status Run() { return ParseBody(b_); }

 private:
  const Token& Peek(size_t k = 0) const { return ts_.Peek(k); }
  const Token& Next() { return ts_.Next(); }
  static bool IsPunct(const Token& t, char c) { return TokenStream::IsPunct(t, c); }
  static absl::Status Err(const Token& t, std::string_view what) {
    return TokenStream::Err(t, what);
  }
  absl::Status Expect(char c) { return ts_.Expect(c); }
  absl::Status SkipPast(char c) { return ts_.SkipPast(c); }
  absl::StatusOr<uint64_t> ExpectInt(std::string_view what) { return ts_.ExpectInt(what); }

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
      if (!ParseTy(t.text, &ty) || ty == Ty::kB128) {
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
          if (auto s = ts_.ParseVarDecl(false, &b.local_shared); !s.ok()) return s;
        } else if (t.text == "local") {
          if (auto s = ts_.ParseVarDecl(false, &b.local_vars); !s.ok()) return s;
        } else if (t.text == "pragma") {
          if (auto s = SkipPast(';'); !s.ok()) return s;
        } else if (t.text == "loc") {  // debug line info: the rest of the line
          while (Peek().kind != Tok::kEnd && Peek().line == t.line) Next();
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
  TokenStream& ts_;
  FnBuilder& b_;
  std::vector<absl::flat_hash_map<std::string, RegRef>> scopes_;
};

}  // namespace

absl::Status ParseFunctionBody(TokenStream& ts, FnBuilder& b) { return BodyParser(ts, b).Run(); }

}  // namespace ptxserve::emu
