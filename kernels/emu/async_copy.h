// Internal to the emulator: the cp.async copies of one block that have not landed yet.
//
// A cp.async reads its source when it is issued but writes shared memory only when the
// issuing thread waits for the copy's group (cp.async.wait_group / wait_all), the latest
// moment the ISA allows. Until then its destination words are "in flight": any shared
// access to them, and another cp.async onto them, is a fault, since on the GPU the access
// could see either the old or the new bytes. A thread that exits with copies in flight is
// a fault too (the executor checks).
#pragma once

#include <cstdint>
#include <vector>

namespace ptxserve::emu {

struct PendingCopy {
  uint32_t dst = 0;  // shared offset
  uint32_t size = 0;
  uint32_t group = 0;  // the issuing thread's number of commits when it was issued
  int32_t line = 0;    // of the cp.async
  uint8_t data[16] = {};
};

struct AsyncCopies {
  std::vector<std::vector<PendingCopy>> pending;  // per thread of the block, in issue order
  std::vector<uint32_t> committed;                // groups each thread has committed
  // Per 4-byte word of shared memory: 1 + the thread whose copy to it is in flight, or 0.
  std::vector<uint32_t> owner;
  std::vector<int32_t> owner_line;
  uint32_t in_flight = 0;  // copies of the whole block not landed

  void Reset(uint32_t threads, uint32_t shared_bytes) {
    pending.resize(threads);
    for (std::vector<PendingCopy>& q : pending) q.clear();  // keeps their capacity
    committed.assign(threads, 0);
    owner.assign((shared_bytes + 3) / 4, 0);
    owner_line.assign(owner.size(), 0);
    in_flight = 0;
  }
};

}  // namespace ptxserve::emu
