#include "engine/chat/jinja_parser.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ptxserve::jinja {
namespace {

using K = Expr::Kind;

ExprPtr Make(K kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Segment>& segments) : segs_(segments) {}

  Body ParseTemplate() {
    std::string stop;
    Body body = ParseBody({}, &stop);
    return body;
  }

 private:
  [[noreturn]] void Fail(int line, const std::string& what) {
    throw TemplateError(absl::StrCat("line ", line, ": ", what));
  }

  // --- statements

  // Parses nodes until a statement whose keyword is in `stops` (returned in *stop, its
  // tokens positioned after the keyword) or the end (*stop empty, an error when `stops`
  // is not empty).
  Body ParseBody(std::initializer_list<const char*> stops, std::string* stop) {
    Body body;
    while (seg_ < segs_.size()) {
      const Segment& s = segs_[seg_++];
      if (s.kind == Segment::Kind::kText) {
        Node n;
        n.kind = Node::Kind::kText;
        n.text = s.text;
        n.line = s.line;
        body.push_back(std::move(n));
        continue;
      }
      toks_ = &s.tokens;
      tok_ = 0;
      if (s.kind == Segment::Kind::kOutput) {
        Node n;
        n.kind = Node::Kind::kOutput;
        n.line = s.line;
        n.expr = ParseExpr();
        ExpectEnd();
        body.push_back(std::move(n));
        continue;
      }
      const Token& kw = Next();
      if (kw.kind != Token::Kind::kName) Fail(kw.line, "expected a statement keyword");
      for (const char* st : stops) {
        if (kw.text == st) {
          *stop = kw.text;
          return body;
        }
      }
      body.push_back(ParseStatement(kw));
    }
    stop->clear();
    if (stops.size() > 0) {
      Fail(segs_.empty() ? 0 : segs_.back().line,
           absl::StrCat("missing '",
                        *stops.begin() == std::string("elif") ? "endif" : *(stops.end() - 1),
                        "' at the end of the template"));
    }
    return body;
  }

  Node ParseStatement(const Token& kw) {
    Node n;
    n.line = kw.line;
    std::string stop;
    if (kw.text == "if") {
      n.kind = Node::Kind::kIf;
      ExprPtr cond = ParseExpr();
      ExpectEnd();
      while (true) {
        Body body = ParseBody({"elif", "else", "endif"}, &stop);
        n.branches.emplace_back(std::move(cond), std::move(body));
        if (stop == "endif") break;
        if (stop == "else") {
          ExpectEnd();
          Body last = ParseBody({"endif"}, &stop);
          n.branches.emplace_back(nullptr, std::move(last));
          break;
        }
        cond = ParseExpr();
        ExpectEnd();
      }
      ExpectEnd();
    } else if (kw.text == "for") {
      n.kind = Node::Kind::kFor;
      do {
        n.targets.push_back(ExpectName());
      } while (Accept(","));
      if (ExpectName() != "in") Fail(kw.line, "expected 'in' in the for statement");
      n.expr = ParseOr();  // no ternary: a trailing `if` filters the loop
      if (AcceptName("if")) n.filter = ParseOr();
      if (Peek().kind == Token::Kind::kName && Peek().text == "recursive") {
        Fail(kw.line, "unsupported construct 'recursive' loop");
      }
      ExpectEnd();
      n.body = ParseBody({"else", "endfor"}, &stop);
      if (stop == "else") {
        ExpectEnd();
        n.else_body = ParseBody({"endfor"}, &stop);
      }
      ExpectEnd();
    } else if (kw.text == "set") {
      n.targets.push_back(ExpectName());
      if (Accept(".")) n.targets.push_back(ExpectName());
      if (Peek().text == ",") Fail(kw.line, "unsupported construct 'set' with several targets");
      if (Accept("=")) {
        n.kind = Node::Kind::kSet;
        n.expr = ParseExpr();
        ExpectEnd();
      } else {
        n.kind = Node::Kind::kSetBlock;
        ExpectEnd();
        n.body = ParseBody({"endset"}, &stop);
        ExpectEnd();
      }
    } else if (kw.text == "generation") {
      // Hugging Face's {% generation %} marks the assistant's tokens for training masks;
      // rendering passes its body through.
      n.kind = Node::Kind::kIf;
      ExpectEnd();
      n.branches.emplace_back(nullptr, ParseBody({"endgeneration"}, &stop));
      ExpectEnd();
    } else if (kw.text == "break" || kw.text == "continue") {
      n.kind = kw.text == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      ExpectEnd();
    } else {
      Fail(kw.line, absl::StrCat("unsupported statement '", kw.text, "'"));
    }
    return n;
  }

  // --- tokens

  const Token& Peek(size_t ahead = 0) const {
    const size_t i = std::min(tok_ + ahead, toks_->size() - 1);
    return (*toks_)[i];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (tok_ < toks_->size() - 1) ++tok_;
    return t;
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  bool Accept(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  void Expect(const char* op) {
    if (!Accept(op)) Fail(Peek().line, absl::StrCat("expected '", op, "', got ", Describe(Peek())));
  }
  std::string ExpectName() {
    if (Peek().kind != Token::Kind::kName)
      Fail(Peek().line, absl::StrCat("expected a name, got ", Describe(Peek())));
    return Next().text;
  }
  void ExpectEnd() {
    if (Peek().kind != Token::Kind::kEnd) {
      Fail(Peek().line,
           absl::StrCat("unexpected ", Describe(Peek()), " before the end of the tag"));
    }
  }
  static std::string Describe(const Token& t) {
    return t.kind == Token::Kind::kEnd ? "end of tag" : absl::StrCat("'", t.text, "'");
  }

  // --- expressions (Jinja2's precedence, lowest first)

  ExprPtr ParseExpr() {
    ExprPtr e = ParseOr();
    if (IsName("if")) {
      const int line = Next().line;
      auto c = Make(K::kCondition, line);
      c->items.push_back(std::move(e));
      c->items.push_back(ParseOr());
      c->items.push_back(AcceptName("else") ? ParseExpr() : nullptr);
      return c;
    }
    return e;
  }

  ExprPtr Binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto b = Make(K::kBinary, line);
    b->name = op;
    b->items.push_back(std::move(l));
    b->items.push_back(std::move(r));
    return b;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) e = Binary("or", std::move(e), (Next(), ParseAnd()), Peek().line);
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) e = Binary("and", std::move(e), (Next(), ParseNot()), Peek().line);
    return e;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      auto u = Make(K::kUnary, Next().line);
      u->name = "not";
      u->items.push_back(ParseNot());
      return u;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseMath1();
    while (true) {
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="}) {
        if (IsOp(o)) op = o;
      }
      if (op.empty() && IsName("in")) op = "in";
      if (op.empty() && IsName("not") && IsName("in", 1)) {
        Next();
        op = "not in";
      }
      if (op.empty()) return e;
      const int line = Next().line;
      e = Binary(op, std::move(e), ParseMath1(), line);
    }
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      e = Binary(t.text, std::move(e), ParseConcat(), t.line);
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (IsOp("~")) {
      const int line = Next().line;
      e = Binary("~", std::move(e), ParseMath2(), line);
    }
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      e = Binary(t.text, std::move(e), ParsePow(), t.line);
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (IsOp("**")) {
      const int line = Next().line;
      e = Binary("**", std::move(e), ParseUnary(true), line);
    }
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      auto u = Make(K::kUnary, t.line);
      u->name = t.text;
      u->items.push_back(ParseUnary(false));
      return with_filter ? ParseFilters(std::move(u)) : std::move(u);
    }
    ExprPtr e = ParsePostfix(ParsePrimary());
    return with_filter ? ParseFilters(std::move(e)) : std::move(e);
  }

  ExprPtr ParsePrimary() {
    const Token& t = Next();
    switch (t.kind) {
      case Token::Kind::kName: {
        static const std::pair<const char*, int> kConstants[] = {
            {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", -1}, {"None", -1}};
        for (const auto& [word, v] : kConstants) {
          if (t.text == word) {
            auto lit = Make(K::kLiteral, t.line);
            lit->value = v < 0 ? Value::None() : Value::Bool(v == 1);
            return lit;
          }
        }
        auto name = Make(K::kName, t.line);
        name->name = t.text;
        return name;
      }
      case Token::Kind::kString: {
        std::string s = t.text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // "a" "b" concatenate
        auto lit = Make(K::kLiteral, t.line);
        lit->value = Value::Str(std::move(s));
        return lit;
      }
      case Token::Kind::kInt:
      case Token::Kind::kFloat: {
        auto lit = Make(K::kLiteral, t.line);
        if (t.kind == Token::Kind::kInt) {
          int64_t v = 0;
          if (!absl::SimpleAtoi(t.text, &v)) Fail(t.line, "integer out of range");
          lit->value = Value::Int(v);
        } else {
          double v = 0;
          absl::SimpleAtod(t.text, &v);
          lit->value = Value::Float(v);
        }
        return lit;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          if (Accept(")")) return Make(K::kTuple, t.line);
          ExprPtr first = ParseExpr();
          if (Accept(")")) return first;
          auto tuple = Make(K::kTuple, t.line);
          tuple->items.push_back(std::move(first));
          while (Accept(",") && !IsOp(")")) tuple->items.push_back(ParseExpr());
          Expect(")");
          return tuple;
        }
        if (t.text == "[") {
          auto list = Make(K::kList, t.line);
          while (!IsOp("]")) {
            list->items.push_back(ParseExpr());
            if (!Accept(",")) break;
          }
          Expect("]");
          return list;
        }
        if (t.text == "{") {
          auto dict = Make(K::kDict, t.line);
          while (!IsOp("}")) {
            dict->items.push_back(ParseExpr());
            Expect(":");
            dict->items.push_back(ParseExpr());
            if (!Accept(",")) break;
          }
          Expect("}");
          return dict;
        }
        break;
      case Token::Kind::kEnd:
        break;
    }
    Fail(t.line, absl::StrCat("unexpected ", Describe(t)));
  }

  void ParseCallArgs(Expr* call) {
    // After '(': positional arguments, then name=value ones.
    while (!IsOp(")")) {
      if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        call->kwargs.emplace_back(std::move(key), ParseExpr());
      } else {
        call->items.push_back(ParseExpr());
      }
      if (!Accept(",")) break;
    }
    Expect(")");
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        auto a = Make(K::kAttr, line);
        a->name = ExpectName();
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (IsOp("[")) {
        const int line = Next().line;
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (!IsOp(":") && !IsOp("]")) parts[n] = ParseExpr();
          if (IsOp(":") && n < 2) {
            Next();
            slice = true;
            ++n;
            continue;
          }
          break;
        }
        Expect("]");
        auto s = Make(slice ? K::kSlice : K::kItem, line);
        s->items.push_back(std::move(e));
        if (!slice && !parts[0]) Fail(line, "empty subscript");
        for (int k = 0; k < (slice ? 3 : 1); ++k) s->items.push_back(std::move(parts[k]));
        e = std::move(s);
      } else if (IsOp("(")) {
        const int line = Next().line;
        auto call = Make(K::kCall, line);
        call->items.push_back(std::move(e));
        ParseCallArgs(call.get());
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseFilters(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        auto f = Make(K::kFilter, line);
        f->name = ExpectName();
        f->items.push_back(std::move(e));
        if (Accept("(")) ParseCallArgs(f.get());
        e = std::move(f);
      } else if (IsName("is")) {
        const int line = Next().line;
        auto t = Make(K::kTest, line);
        t->negated = AcceptName("not");
        t->name = ExpectName();
        t->items.push_back(std::move(e));
        if (Accept("(")) {
          ParseCallArgs(t.get());
        } else if (TakesBareArgument()) {
          t->items.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // `x is equalto 3`: a test's one argument may follow without parentheses.
  bool TakesBareArgument() const {
    const Token& t = Peek();
    if (t.kind == Token::Kind::kName) {
      for (const char* kw : {"else", "or", "and", "if", "in", "not", "is"}) {
        if (t.text == kw) return false;
      }
      return true;
    }
    return t.kind == Token::Kind::kString || t.kind == Token::Kind::kInt ||
           t.kind == Token::Kind::kFloat || IsOp("[") || IsOp("{");
  }

  const std::vector<Segment>& segs_;
  size_t seg_ = 0;
  const std::vector<Token>* toks_ = nullptr;
  size_t tok_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Segment>& segments) {
  try {
    Parser p(segments);
    return p.ParseTemplate();
  } catch (const TemplateError& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

}  // namespace ptxserve::jinja
