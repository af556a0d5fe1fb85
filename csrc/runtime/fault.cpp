// Fault injection switch (see fault.hpp): parsing of OPBENCH_FAULT_* and the faults themselves. Compiled
// only into test builds (-DOPBENCH_FAULT_INJECTION=ON).
#include "opbench/fault.hpp"

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "opbench/fp16.hpp"

namespace opbench {

namespace {

bool listed(const char* var, int64_t m, int64_t n, int64_t k) {
  const char* value = std::getenv(var);
  if (value == nullptr || *value == '\0') return false;
  std::stringstream all(value);
  std::string item;
  while (std::getline(all, item, ',')) {
    long long a = 0, b = 0, c = 0;
    char x1 = 0, x2 = 0;
    std::stringstream one(item);
    if ((one >> a >> x1 >> b >> x2 >> c) && x1 == 'x' && x2 == 'x' && a == m && b == n && c == k) return true;
  }
  return false;
}

}  // namespace

Fault injected_fault(int64_t tile_m, int64_t tile_n, int64_t tile_k) {
  if (listed("OPBENCH_FAULT_CRASH", tile_m, tile_n, tile_k)) return Fault::crash;
  if (listed("OPBENCH_FAULT_HANG", tile_m, tile_n, tile_k)) return Fault::hang;
  if (listed("OPBENCH_FAULT_WRONG", tile_m, tile_n, tile_k)) return Fault::wrong;
  if (listed("OPBENCH_FAULT_SLOW", tile_m, tile_n, tile_k)) return Fault::slow;
  return Fault::none;
}

void trigger(Fault fault) {
  if (fault == Fault::crash) {
    volatile int* null_pointer = nullptr;
    *null_pointer = 1;  // a genuine invalid write: the process dies of SIGSEGV
  }
  if (fault == Fault::slow) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (fault == Fault::hang) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void corrupt(Fault fault, void* first, bool half) {
  if (fault != Fault::wrong) return;
  if (half) {  // fp16 or bf16: flipping the exponent's top bit moves any value (0 becomes 2)
    *static_cast<uint16_t*>(first) ^= 0x4000u;
  } else {
    *static_cast<float*>(first) += 1.0f;
  }
}

}  // namespace opbench
