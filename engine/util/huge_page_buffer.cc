#include "engine/util/huge_page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <utility>

namespace ptxserve {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

HugePageBuffer::HugePageBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  mapped_ = RoundUp(bytes, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  // Reserve a huge page more than needed and unmap the unaligned head and the rest of the
  // tail, so the buffer starts on a 2 MiB boundary without wasting memory.
  const size_t reserve = mapped_ >= kHugePage ? mapped_ + kHugePage : mapped_;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = reserve > mapped_ ? RoundUp(begin, kHugePage) : begin;
  if (aligned > begin) ::munmap(p, aligned - begin);
  const uintptr_t end = aligned + mapped_;
  if (begin + reserve > end) ::munmap(reinterpret_cast<void*>(end), begin + reserve - end);
  data_ = reinterpret_cast<uint8_t*>(aligned);
  // Only advice: where transparent huge pages are off the buffer is ordinary memory.
  if (mapped_ >= kHugePage) ::madvise(data_, mapped_, MADV_HUGEPAGE);
}

HugePageBuffer::~HugePageBuffer() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace ptxserve
