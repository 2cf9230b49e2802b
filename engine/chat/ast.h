// The compiled template: an immutable tree of statements and expressions, shared by
// every render (and thread) of a ChatTemplate.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/value.h"

namespace ptxserve::chat {

class Evaluator;
struct CallArgs;
// Filters get the value left of `|`, tests the value left of `is`.
using FilterFn = Value (*)(Evaluator& ev, const Value& subject, const CallArgs& args);
using TestFn = bool (*)(Evaluator& ev, const Value& subject, const CallArgs& args);

enum class ExprKind {
  kConst,
  kName,
  kList,
  kTuple,
  kDict,    // args alternate key, value
  kAttr,    // args[0].name
  kItem,    // args[0][args[1]]
  kSlice,   // args[0][args[1]:args[2]:args[3]], omitted bounds are null
  kCall,    // args[0](args[1:], kwargs)
  kFilter,  // args[0] | name(args[1:], kwargs)
  kTest,    // args[0] is [not] name(args[1:], kwargs)
  kNeg,
  kPos,
  kNot,
  kBinary,   // args[0] op args[1]
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained, like Python)
  kAnd,
  kOr,
  kCond,    // args[1] if args[0] else args[2] (args[2] null: Undefined)
  kConcat,  // args joined with ~
};

enum class BinOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;       // kConst
  std::string name;  // kName, kAttr, kFilter, kTest
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  BinOp op = BinOp::kAdd;
  std::vector<CmpOp> cmp_ops;
  bool negated = false;  // kTest: `is not`
  FilterFn filter = nullptr;
  TestFn test = nullptr;
};

enum class NodeKind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kMacro };

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput, kSet value, kFor iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: if/elif conditions and bodies
  Body body;                                       // kFor, kSetBlock, kMacro
  Body else_body;                                  // kIf, kFor
  // kFor/kSet/kSetBlock: the names assigned (several when unpacking a tuple). kSet with
  // a namespace target: targets = {namespace variable}, attr = the attribute.
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr loop_filter;  // kFor: `for x in y if cond`
  // kMacro: name in `attr`, parameters in `targets`, their defaults (null: required).
  std::vector<ExprPtr> defaults;
};

}  // namespace ptxserve::chat
