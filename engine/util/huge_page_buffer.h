// Anonymous memory for weights that are streamed every decode step, placed on 2 MiB
// transparent huge pages where the kernel allows them.
//
// A decode step reads every weight byte once, so the CPU walks the page tables once per
// page of weights: 2.4 GB of f16 weights is 600k 4 KiB pages but 1200 huge ones. Under a
// hypervisor each TLB miss walks two levels of tables. Weights read through a file mapping
// sit on whatever page-cache folios the file happened to get (on ext4 and Linux 6.x a mix
// of 2 MiB folios and smaller ones, depending on whether the file was last written or read),
// which made the same binary's decode speed vary between runs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptxserve {

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // `bytes` of zeroed memory, 2 MiB-aligned when at least 2 MiB (so every whole 2 MiB
  // piece can be one huge page) and advised MADV_HUGEPAGE; a plain allocation otherwise.
  // Throws std::bad_alloc when the memory cannot be mapped, as a vector would.
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;    // bytes asked for
  size_t mapped_ = 0;  // bytes mapped at data_ (size_ rounded up to whole pages)
};

}  // namespace ptxserve
