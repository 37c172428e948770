// Reads a CPU tensor before writing it, from a block the allocator's cache handed out again: run
// under valgrind by the ctest core.recycled_block_is_undefined_for_valgrind, which expects
// memcheck to report the read (Note [Small CPU blocks] and as_fresh in core/allocator.cc).
#include <cstdio>

#include "core/creation.h"

int main() {
  { distgrad::Tensor first = distgrad::full({100}, 1.0); }  // its block goes back to the cache
  const distgrad::Tensor again = distgrad::empty({100});    // the same size class: the same block
  if (static_cast<const float*>(again.data_ptr())[3] > 0.5f) std::puts("read a recycled value");
  return 0;
}
