// The parsed template: expressions and statements of the Jinja2 subset that chat
// templates use.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja_value.h"

namespace ptxserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items: key, value, key, value, ...
    kAttr,       // items[0].name
    kItem,       // items[0][items[1]]
    kSlice,      // items[0][items[1]:items[2]:items[3]] (null parts omitted)
    kCall,       // items[0](items[1..], kwargs)
    kFilter,     // items[0] | name(items[1..], kwargs)
    kTest,       // items[0] is [not] name(items[1..])
    kUnary,      // name ("not", "-", "+") items[0]
    kBinary,     // items[0] name items[1] (arithmetic, comparison, "in", "and", "or", "~")
    kCondition,  // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  Value value;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int line = 0;
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;  // kText
  ExprPtr expr;      // kOutput, kSet (the value), kFor (the iterable)
  // kIf: (condition, body) per branch; the else branch has a null condition.
  std::vector<std::pair<ExprPtr, Body>> branches;
  // kFor: the loop variables; kSet / kSetBlock: one name, or "ns.attr" as {ns, attr}.
  std::vector<std::string> targets;
  ExprPtr filter;  // kFor: `for x in y if filter`
  Body body;       // kFor, kSetBlock
  Body else_body;  // kFor
};

}  // namespace ptxserve::jinja
