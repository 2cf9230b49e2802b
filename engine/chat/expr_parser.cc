#include "engine/chat/expr_parser.h"

#include <cstdlib>

#include "engine/chat/builtins.h"

namespace ptxserve::chat {

ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

namespace {

ExprPtr Binary(ExprKind kind, ExprPtr a, ExprPtr b, int line) {
  auto e = MakeExpr(kind, line);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

}  // namespace

ExprPtr ExprParser::Expression(bool with_condexpr) {
  if (!with_condexpr) return Or();
  ExprPtr expr = Or();
  while (ts_.IsName("if")) {
    const int line = ts_.Next().line;
    auto cond = MakeExpr(ExprKind::kCond, line);
    cond->args.push_back(Or());
    cond->args.push_back(std::move(expr));
    cond->args.push_back(ts_.SkipName("else") ? Expression() : nullptr);
    expr = std::move(cond);
  }
  return expr;
}

bool ExprParser::AtTupleEnd(std::initializer_list<std::string_view> end_names) const {
  const Token& t = ts_.Peek();
  if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
      t.type == TokenType::kEof) {
    return true;
  }
  if (ts_.IsOp(")")) return true;
  for (std::string_view name : end_names) {
    if (ts_.IsName(name)) return true;
  }
  return false;
}

ExprPtr ExprParser::Tuple(bool with_condexpr, std::initializer_list<std::string_view> end_names) {
  const int line = ts_.Peek().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) ts_.ExpectOp(",");
    if (AtTupleEnd(end_names)) break;
    items.push_back(Expression(with_condexpr));
    if (ts_.IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (items.empty()) ts_.Fail("expected an expression, got " + ts_.Describe(ts_.Peek()));
    return std::move(items[0]);
  }
  auto tuple = MakeExpr(ExprKind::kTuple, line);
  tuple->args = std::move(items);
  return tuple;
}

ExprPtr ExprParser::Or() { return Logical(ExprKind::kOr, "or", &ExprParser::And); }

ExprPtr ExprParser::And() { return Logical(ExprKind::kAnd, "and", &ExprParser::Not); }

ExprPtr ExprParser::Logical(ExprKind kind, std::string_view keyword,
                            ExprPtr (ExprParser::*operand)()) {
  ExprPtr left = (this->*operand)();
  while (ts_.IsName(keyword)) {
    const int line = ts_.Next().line;
    left = Binary(kind, std::move(left), (this->*operand)(), line);
  }
  return left;
}

ExprPtr ExprParser::Not() {
  if (ts_.IsName("not")) {
    auto e = MakeExpr(ExprKind::kNot, ts_.Next().line);
    e->args.push_back(Not());
    return e;
  }
  return Compare();
}

ExprPtr ExprParser::Compare() {
  const int line = ts_.Peek().line;
  ExprPtr first = Math1();
  auto cmp = MakeExpr(ExprKind::kCompare, line);
  cmp->args.push_back(std::move(first));
  static const std::pair<std::string_view, CmpOp> kOps[] = {{"==", CmpOp::kEq}, {"!=", CmpOp::kNe},
                                                            {"<", CmpOp::kLt},  {"<=", CmpOp::kLe},
                                                            {">", CmpOp::kGt},  {">=", CmpOp::kGe}};
  while (true) {
    bool matched = false;
    for (const auto& [text, op] : kOps) {
      if (ts_.SkipOp(text)) {
        cmp->cmp_ops.push_back(op);
        matched = true;
        break;
      }
    }
    if (!matched && ts_.SkipName("in")) {
      cmp->cmp_ops.push_back(CmpOp::kIn);
      matched = true;
    } else if (!matched && ts_.IsName("not") && ts_.IsName("in", 1)) {
      ts_.Next();
      ts_.Next();
      cmp->cmp_ops.push_back(CmpOp::kNotIn);
      matched = true;
    }
    if (!matched) break;
    cmp->args.push_back(Math1());
  }
  if (cmp->cmp_ops.empty()) return std::move(cmp->args[0]);
  return cmp;
}

ExprPtr ExprParser::Math1() {
  ExprPtr left = Concat();
  while (ts_.IsOp("+") || ts_.IsOp("-")) {
    const Token& t = ts_.Next();
    auto e = Binary(ExprKind::kBinary, std::move(left), nullptr, t.line);
    e->op = t.value == "+" ? BinOp::kAdd : BinOp::kSub;
    e->args[1] = Concat();
    left = std::move(e);
  }
  return left;
}

ExprPtr ExprParser::Concat() {
  const int line = ts_.Peek().line;
  ExprPtr first = Math2();
  if (!ts_.IsOp("~")) return first;
  auto e = MakeExpr(ExprKind::kConcat, line);
  e->args.push_back(std::move(first));
  while (ts_.SkipOp("~")) e->args.push_back(Math2());
  return e;
}

ExprPtr ExprParser::Math2() {
  ExprPtr left = Pow();
  while (ts_.IsOp("*") || ts_.IsOp("/") || ts_.IsOp("//") || ts_.IsOp("%")) {
    const Token& t = ts_.Next();
    auto e = Binary(ExprKind::kBinary, std::move(left), nullptr, t.line);
    e->op = t.value == "*"    ? BinOp::kMul
            : t.value == "/"  ? BinOp::kDiv
            : t.value == "//" ? BinOp::kFloorDiv
                              : BinOp::kMod;
    e->args[1] = Pow();
    left = std::move(e);
  }
  return left;
}

ExprPtr ExprParser::Pow() {
  ExprPtr left = Unary(true);
  while (ts_.IsOp("**")) {
    const int line = ts_.Next().line;
    left = Binary(ExprKind::kBinary, std::move(left), Unary(true), line);
    left->op = BinOp::kPow;
  }
  return left;
}

ExprPtr ExprParser::Unary(bool with_filter) {
  ExprPtr node;
  if (ts_.IsOp("-") || ts_.IsOp("+")) {
    const Token& t = ts_.Next();
    node = MakeExpr(t.value == "-" ? ExprKind::kNeg : ExprKind::kPos, t.line);
    node->args.push_back(Unary(false));
  } else {
    node = Primary();
  }
  node = Postfix(std::move(node));
  return with_filter ? FilterExpr(std::move(node)) : std::move(node);
}

ExprPtr ExprParser::Primary() {
  const Token& t = ts_.Next();
  switch (t.type) {
    case TokenType::kName: {
      auto e = MakeExpr(ExprKind::kConst, t.line);
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        e->value = Value::Bool(t.value[0] == 't' || t.value[0] == 'T');
      } else if (t.value == "none" || t.value == "None") {
        e->value = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      return e;
    }
    case TokenType::kString: {
      std::string s = t.value;
      while (ts_.Peek().type == TokenType::kString) s += ts_.Next().value;  // 'a' 'b' == 'ab'
      auto e = MakeExpr(ExprKind::kConst, t.line);
      e->value = Value::String(std::move(s));
      return e;
    }
    case TokenType::kInteger:
    case TokenType::kFloat: {
      auto e = MakeExpr(ExprKind::kConst, t.line);
      e->value = t.type == TokenType::kInteger
                     ? Value::Int(std::strtoll(t.value.c_str(), nullptr, 10))
                     : Value::Float(std::strtod(t.value.c_str(), nullptr));
      return e;
    }
    case TokenType::kOperator:
      if (t.value == "(") {
        if (ts_.SkipOp(")")) {
          auto e = MakeExpr(ExprKind::kTuple, t.line);
          return e;
        }
        ExprPtr inner = Tuple();
        ts_.ExpectOp(")");
        return inner;
      }
      if (t.value == "[" || t.value == "{") return ListOrDict(t.value == "{");
      break;
    default:
      break;
  }
  throw SyntaxError(t.line, "unexpected " + ts_.Describe(t));
}

ExprPtr ExprParser::ListOrDict(bool dict) {
  const char* close = dict ? "}" : "]";
  auto e = MakeExpr(dict ? ExprKind::kDict : ExprKind::kList, ts_.Peek().line);
  while (!ts_.IsOp(close)) {
    if (!e->args.empty()) {
      ts_.ExpectOp(",");
      if (ts_.IsOp(close)) break;
    }
    e->args.push_back(Expression());
    if (dict) {
      ts_.ExpectOp(":");
      e->args.push_back(Expression());
    }
  }
  ts_.ExpectOp(close);
  return e;
}

ExprPtr ExprParser::Postfix(ExprPtr node) {
  while (true) {
    if (ts_.IsOp(".") || ts_.IsOp("[")) {
      node = Subscript(std::move(node));
    } else if (ts_.IsOp("(")) {
      node = Call(std::move(node));
    } else {
      return node;
    }
  }
}

// A call that can only mean a Python method or jinja2 helper we do not implement fails
// here, at Compile, rather than on the first request that reaches it.
void CheckCallee(const Expr& callee) {
  if (callee.kind == ExprKind::kAttr && IsUnsupportedMethod(callee.name)) {
    throw SyntaxError(callee.line, "unsupported method '." + callee.name + "()'");
  }
  if (callee.kind == ExprKind::kName && IsUnsupportedGlobal(callee.name)) {
    throw SyntaxError(callee.line, "unsupported function '" + callee.name + "()'");
  }
}

ExprPtr ExprParser::Call(ExprPtr callee) {
  CheckCallee(*callee);
  auto call = MakeExpr(ExprKind::kCall, ts_.Peek().line);
  call->args.push_back(std::move(callee));
  CallArgs(call.get());
  return call;
}

ExprPtr ExprParser::FilterExpr(ExprPtr node) {
  while (true) {
    if (ts_.IsOp("|")) {
      node = Filter(std::move(node));
    } else if (ts_.IsName("is")) {
      node = Test(std::move(node));
    } else if (ts_.IsOp("(")) {
      node = Call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::Subscript(ExprPtr node) {
  const Token& t = ts_.Next();
  if (t.value == ".") {
    const Token& attr = ts_.Next();
    if (attr.type == TokenType::kName) {
      auto e = MakeExpr(ExprKind::kAttr, t.line);
      e->name = attr.value;
      e->args.push_back(std::move(node));
      return e;
    }
    if (attr.type != TokenType::kInteger) throw SyntaxError(attr.line, "expected name or number");
    auto index = MakeExpr(ExprKind::kConst, attr.line);
    index->value = Value::Int(std::strtoll(attr.value.c_str(), nullptr, 10));
    return Binary(ExprKind::kItem, std::move(node), std::move(index), t.line);
  }
  // '[': an index or a slice start:stop:step with any part omitted.
  std::vector<ExprPtr> parts;
  bool is_slice = false;
  auto bound = [&]() -> ExprPtr {
    return (ts_.IsOp(":") || ts_.IsOp("]")) ? nullptr : Expression();
  };
  parts.push_back(bound());
  while (ts_.SkipOp(":")) {
    is_slice = true;
    if (parts.size() == 3) ts_.Fail("expected ']'");
    parts.push_back(bound());
  }
  if (ts_.IsOp(",")) ts_.Fail("unsupported construct: tuple subscript");
  ts_.ExpectOp("]");
  if (!is_slice) {
    if (!parts[0]) throw SyntaxError(t.line, "expected an expression, got ']'");
    return Binary(ExprKind::kItem, std::move(node), std::move(parts[0]), t.line);
  }
  auto e = MakeExpr(ExprKind::kSlice, t.line);
  e->args.push_back(std::move(node));
  for (auto& p : parts) e->args.push_back(std::move(p));
  while (e->args.size() < 4) e->args.push_back(nullptr);
  return e;
}

void ExprParser::CallArgs(Expr* call) {
  ts_.ExpectOp("(");
  while (!ts_.IsOp(")")) {
    if (call->args.size() + call->kwargs.size() > 1) ts_.ExpectOp(",");  // args[0] is the callee
    if (ts_.IsOp(")")) break;
    if (ts_.IsOp("*") || ts_.IsOp("**"))
      ts_.Fail("unsupported construct: *args/**kwargs in a call");
    if (ts_.Peek().type == TokenType::kName && ts_.IsOp("=", 1)) {
      std::string key = ts_.Next().value;
      ts_.Next();
      call->kwargs.emplace_back(std::move(key), Expression());
    } else {
      if (!call->kwargs.empty()) ts_.Fail("positional argument after keyword argument");
      call->args.push_back(Expression());
    }
  }
  ts_.ExpectOp(")");
}

ExprPtr ExprParser::Filter(ExprPtr node) {
  ts_.ExpectOp("|");
  const int line = ts_.Peek().line;
  std::string name = ts_.ExpectName();
  while (ts_.IsOp(".") && ts_.Peek(1).type == TokenType::kName) {
    ts_.Next();
    name += "." + ts_.Next().value;
  }
  auto e = MakeExpr(ExprKind::kFilter, line);
  e->name = name;
  e->filter = FindFilter(name);
  if (e->filter == nullptr) throw SyntaxError(line, "unsupported filter '" + name + "'");
  e->args.push_back(std::move(node));
  if (ts_.IsOp("(")) CallArgs(e.get());
  return e;
}

ExprPtr ExprParser::Test(ExprPtr node) {
  const int line = ts_.Next().line;  // 'is'
  auto e = MakeExpr(ExprKind::kTest, line);
  e->negated = ts_.SkipName("not");
  e->name = ts_.ExpectName();
  e->test = FindTest(e->name);
  if (e->test == nullptr) throw SyntaxError(line, "unsupported test '" + e->name + "'");
  e->args.push_back(std::move(node));
  const Token& t = ts_.Peek();
  if (ts_.IsOp("(")) {
    CallArgs(e.get());
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || ts_.IsOp("[") ||
              ts_.IsOp("{")) &&
             !ts_.IsName("else") && !ts_.IsName("or") && !ts_.IsName("and")) {
    // jinja2 takes one bare argument: `x is divisibleby 3`, `x is sameas none`.
    if (ts_.IsName("is")) ts_.Fail("you cannot chain multiple tests with is");
    e->args.push_back(Postfix(Primary()));
  }
  return e;
}

}  // namespace ptxserve::chat
