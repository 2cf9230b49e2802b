// PTX module parser: .version/.target/.address_size, module-scope .shared variables and
// .entry signatures (parameters and launch-bound attributes); each body is parsed by
// body_parser.cc and decoded (decoder.cc). Anything not understood is an error naming the
// line.
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "kernels/emu/token_stream.h"

namespace ptxserve::emu {
namespace {

class Parser : public TokenStream {
 public:
  Parser(std::vector<Token> toks, Module* mod) : TokenStream(std::move(toks)), mod_(mod) {}

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
  absl::Status ParseDeclaration() {
    bool is_extern = false;
    while (IsDot(Peek(), "visible") || IsDot(Peek(), "weak") || IsDot(Peek(), "extern")) {
      if (Next().text == "extern") is_extern = true;
    }
    const Token& kw = Next();
    if (IsDot(kw, "shared")) return ParseVarDecl(is_extern, &module_shared_);
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
        } else if (ParseTy(t.text, &tt) && tt != Ty::kPred) {
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
    b.module = mod_;
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
    if (auto s = ParseFunctionBody(*this, b); !s.ok()) return s;
    if (auto s = DecodeFunction(b); !s.ok()) return s;
    mod_->functions.push_back(std::move(fn));
    return absl::OkStatus();
  }

  Module* mod_;
  absl::flat_hash_map<std::string, SharedVar> module_shared_;
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