// Early-return helpers for absl::Status / absl::StatusOr (prefixed so they cannot clash
// with Abseil's or another library's macros of the same purpose).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` from the enclosing function when it is not OK.
#define PTX_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status ptx_status_ = (expr);       \
    if (!ptx_status_.ok()) return ptx_status_; \
  } while (0)

#define PTX_CONCAT_INNER_(a, b) a##b
#define PTX_CONCAT_(a, b) PTX_CONCAT_INNER_(a, b)

// `PTX_ASSIGN_OR_RETURN(auto x, StatusOrExpr());` declares x from the value or returns the
// error.
#define PTX_ASSIGN_OR_RETURN(lhs, expr) \
  PTX_ASSIGN_OR_RETURN_IMPL_(PTX_CONCAT_(ptx_statusor_, __LINE__), lhs, expr)
#define PTX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
