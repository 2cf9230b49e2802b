// Expression half of the parser: jinja2's precedence climbing (condexpr > or > and >
// not > compare > + - > ~ > * / // % > ** > unary with postfix, filters and tests).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/ast.h"
#include "engine/chat/token_stream.h"

namespace ptxserve::chat {

class ExprParser {
 public:
  explicit ExprParser(TokenStream& ts) : ts_(ts) {}

  ExprPtr Expression(bool with_condexpr = true);
  // Comma-separated expressions become a tuple (`{% set a = 1, 2 %}`, `{{ x, y }}`).
  // Parsing stops before a name in `end_names` (e.g. "recursive").
  ExprPtr Tuple(bool with_condexpr = true, std::initializer_list<std::string_view> end_names = {});

 private:
  ExprPtr Or();
  ExprPtr Logical(ExprKind kind, std::string_view keyword, ExprPtr (ExprParser::*operand)());
  ExprPtr And();
  ExprPtr Not();
  ExprPtr Compare();
  ExprPtr Math1();
  ExprPtr Concat();
  ExprPtr Math2();
  ExprPtr Pow();
  ExprPtr Unary(bool with_filter);
  ExprPtr Primary();
  ExprPtr Postfix(ExprPtr node);
  ExprPtr FilterExpr(ExprPtr node);
  ExprPtr Call(ExprPtr callee);
  ExprPtr Filter(ExprPtr node);
  ExprPtr Test(ExprPtr node);
  ExprPtr Subscript(ExprPtr node);
  ExprPtr ListOrDict(bool dict);
  void CallArgs(Expr* call);
  bool AtTupleEnd(std::initializer_list<std::string_view> end_names) const;

  TokenStream& ts_;
};

ExprPtr MakeExpr(ExprKind kind, int line);

}  // namespace ptxserve::chat
