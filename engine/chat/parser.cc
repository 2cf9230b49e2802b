#include "engine/chat/parser.h"

#include <initializer_list>
#include <string>

#include "engine/chat/expr_parser.h"

namespace ptxserve::chat {
namespace {

bool Contains(std::initializer_list<std::string_view> names, std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

std::unique_ptr<Node> MakeNode(NodeKind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

class StatementParser {
 public:
  explicit StatementParser(const std::vector<Token>& tokens) : ts_(tokens), exprs_(ts_) {}

  Body Template() {
    Body body = Subparse({}, nullptr);
    if (ts_.Peek().type != TokenType::kEof) ts_.Fail("unexpected " + ts_.Describe(ts_.Peek()));
    return body;
  }

 private:
  // Parses until `{% <one of ends> ...`, leaving the end tag's name consumed.
  Body Subparse(std::initializer_list<std::string_view> ends, std::string* ended_by) {
    Body body;
    while (true) {
      const Token& t = ts_.Peek();
      switch (t.type) {
        case TokenType::kData: {
          auto n = MakeNode(NodeKind::kText, t.line);
          n->text = ts_.Next().value;
          body.push_back(std::move(n));
          break;
        }
        case TokenType::kVariableBegin: {
          auto n = MakeNode(NodeKind::kOutput, ts_.Next().line);
          n->expr = exprs_.Tuple();
          ts_.ExpectType(TokenType::kVariableEnd, "end of print statement");
          body.push_back(std::move(n));
          break;
        }
        case TokenType::kBlockBegin: {
          ts_.Next();
          if (ts_.Peek().type != TokenType::kName) ts_.Fail("tag name expected");
          if (Contains(ends, ts_.Peek().value)) {
            *ended_by = ts_.Next().value;
            return body;
          }
          body.push_back(Statement());
          break;
        }
        case TokenType::kEof:
          if (ends.size() != 0) {
            ts_.Fail("unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
          }
          return body;
        default:
          ts_.Fail("unexpected " + ts_.Describe(t));
      }
    }
  }

  void EndOfTag() { ts_.ExpectType(TokenType::kBlockEnd, "end of statement block"); }

  std::unique_ptr<Node> Statement() {
    const Token& tag = ts_.Next();
    const int line = tag.line;
    const std::string& name = tag.value;
    if (name == "if") return If(line);
    if (name == "for") return For(line);
    if (name == "set") return Set(line);
    if (name == "macro") return Macro(line);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) throw SyntaxError(line, "'" + name + "' outside of a loop");
      EndOfTag();
      return MakeNode(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      throw SyntaxError(line, "unexpected '" + name + "'");
    }
    throw SyntaxError(line, "unsupported tag '" + name + "'");
  }

  std::unique_ptr<Node> If(int line) {
    auto n = MakeNode(NodeKind::kIf, line);
    ExprPtr cond = exprs_.Tuple(/*with_condexpr=*/false);
    EndOfTag();
    while (true) {
      std::string end;
      Body body = Subparse({"elif", "else", "endif"}, &end);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = exprs_.Tuple(false);
        EndOfTag();
        continue;
      }
      EndOfTag();
      if (end == "else") {
        n->else_body = Subparse({"endif"}, &end);
        EndOfTag();
      }
      return n;
    }
  }

  std::vector<std::string> Targets() {
    const bool paren = ts_.SkipOp("(");
    std::vector<std::string> names{ts_.ExpectName()};
    while (ts_.SkipOp(",")) names.push_back(ts_.ExpectName());
    if (paren) ts_.ExpectOp(")");
    return names;
  }

  std::unique_ptr<Node> For(int line) {
    auto n = MakeNode(NodeKind::kFor, line);
    n->targets = Targets();
    if (!ts_.SkipName("in")) ts_.Fail("expected 'in', got " + ts_.Describe(ts_.Peek()));
    n->expr = exprs_.Tuple(false, {"recursive"});
    if (ts_.IsName("recursive")) ts_.Fail("unsupported construct: recursive for loop");
    if (ts_.SkipName("if")) n->loop_filter = exprs_.Expression();
    EndOfTag();
    ++loop_depth_;
    std::string end;
    n->body = Subparse({"endfor", "else"}, &end);
    --loop_depth_;
    EndOfTag();
    if (end == "else") {
      n->else_body = Subparse({"endfor"}, &end);
      EndOfTag();
    }
    return n;
  }

  std::unique_ptr<Node> Set(int line) {
    auto n = MakeNode(NodeKind::kSet, line);
    std::string first = ts_.ExpectName();
    if (ts_.SkipOp(".")) {
      n->attr = ts_.ExpectName();
      n->targets.push_back(std::move(first));
    } else {
      n->targets.push_back(std::move(first));
      while (ts_.SkipOp(",")) n->targets.push_back(ts_.ExpectName());
    }
    if (ts_.SkipOp("=")) {
      n->expr = exprs_.Tuple();
      EndOfTag();
      return n;
    }
    if (!n->attr.empty() || n->targets.size() != 1) ts_.Fail("expected '='");
    if (ts_.IsOp("|")) ts_.Fail("unsupported construct: filtered block set");
    EndOfTag();
    n->kind = NodeKind::kSetBlock;
    std::string end;
    n->body = Subparse({"endset"}, &end);
    EndOfTag();
    return n;
  }

  std::unique_ptr<Node> Macro(int line) {
    auto n = MakeNode(NodeKind::kMacro, line);
    n->attr = ts_.ExpectName();
    ts_.ExpectOp("(");
    while (!ts_.IsOp(")")) {
      if (!n->targets.empty()) ts_.ExpectOp(",");
      n->targets.push_back(ts_.ExpectName());
      if (ts_.SkipOp("=")) {
        n->defaults.push_back(exprs_.Expression());
      } else if (!n->defaults.empty() && n->defaults.back()) {
        ts_.Fail("non-default argument follows default argument");
      } else {
        n->defaults.push_back(nullptr);
      }
    }
    ts_.ExpectOp(")");
    EndOfTag();
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // a loop around the definition does not make `break` legal inside
    std::string end;
    n->body = Subparse({"endmacro"}, &end);
    loop_depth_ = saved_depth;
    EndOfTag();
    return n;
  }

  TokenStream ts_;
  ExprParser exprs_;
  int loop_depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return StatementParser(tokens).Template(); }

}  // namespace ptxserve::chat
