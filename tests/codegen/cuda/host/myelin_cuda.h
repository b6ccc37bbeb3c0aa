// Host emulation of the CUDA built-ins myelin's generated kernels use, so the very source
// NVRTC compiles also compiles as C++20 with g++ and runs on the CPU (tests/cuda/emulator.py).
//
// This file stands in for the support header NVRTC gets (myelin/codegen/cuda/support.py):
// the module source includes "myelin_cuda.h" and finds this one on the include path. A launch
// runs the blocks one after the other (so `static` storage serves as shared memory) and each
// thread of a block as a fiber of its own (see EmuBlock); __syncthreads() is a barrier of the
// block and each warp shuffle exchanges values through a barrier of its warp, so the kernels'
// synchronization is exercised for real: a thread that does not reach a barrier its
// neighbours wait at fails the launch.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)
#define __align__(n) alignas(n)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

inline dim3 gridDim, blockDim;
inline dim3 threadIdx, blockIdx;

struct __align__(2) __half {
  unsigned short x;
};

inline float __half2float(__half h) {
  const unsigned sign = (h.x >> 15) & 1u, exponent = (h.x >> 10) & 0x1fu, mantissa = h.x & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float value = std::ldexp((float)mantissa, -24);
    return sign ? -value : value;
  }
  const unsigned bits = (sign << 31) | (exponent == 0x1f ? 0x7f800000u | (mantissa << 13)
                                                         : ((exponent + 112) << 23) | (mantissa << 13));
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline __half __float2half_rn(float f) {  // round to nearest, ties to even
  unsigned bits;
  std::memcpy(&bits, &f, 4);
  const unsigned sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  unsigned out;
  if (magnitude >= 0x7f800000u) {
    out = 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u);  // inf, NaN
  } else if (magnitude >= 0x477ff000u) {
    out = 0x7c00u;  // 65520 and above round to inf
  } else if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal (or zero)
    float value;
    std::memcpy(&value, &magnitude, 4);
    out = (unsigned)std::nearbyint(value * 16777216.0f);
  } else {
    out = (((magnitude >> 23) - 112) << 10) | ((magnitude & 0x7fffffu) >> 13);
    const unsigned rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (out & 1u))) out++;
  }
  return __half{(unsigned short)(sign | out)};
}

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// The block being run: one fiber (a ucontext with its own stack) per CUDA thread, all on the
// calling thread. A fiber runs until it reaches a barrier or returns; the scheduler then runs
// the next. A fiber waiting at __syncthreads() goes on once every thread of the block waits
// there, one waiting in a warp shuffle once every thread of its warp does.
enum class EmuState { kRunnable, kBlock, kWarp, kDone };

struct EmuBlock {
  std::vector<ucontext_t> fibers;
  std::vector<EmuState> states;
  std::vector<std::array<unsigned char, 8>> slots;  // a shuffle's value of each thread
  ucontext_t scheduler;
  unsigned threads = 0;
};

inline EmuBlock* emu_block = nullptr;
inline unsigned emu_thread = 0;
inline void (*emu_call)(void**) = nullptr;
inline void** emu_args = nullptr;

inline void emu_wait(EmuState state) {
  emu_block->states[emu_thread] = state;
  swapcontext(&emu_block->fibers[emu_thread], &emu_block->scheduler);
}

inline void __syncthreads() { emu_wait(EmuState::kBlock); }

template <class T>
T __shfl_xor_sync(unsigned, T value, int lane_mask, int = 32) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  const unsigned self = emu_thread, warp = self / 32, lane = self % 32;
  unsigned source = warp * 32 + (lane ^ (unsigned)lane_mask);
  if (source >= emu_block->threads) source = self;
  std::memcpy(emu_block->slots[self].data(), &value, sizeof(T));
  emu_wait(EmuState::kWarp);  // every lane has written its value
  T result;
  std::memcpy(&result, emu_block->slots[source].data(), sizeof(T));
  emu_wait(EmuState::kWarp);  // every lane has read, so the slots may be written again
  return result;
}

inline void emu_fiber() {
  emu_call(emu_args);
  emu_block->states[emu_thread] = EmuState::kDone;  // returns to the scheduler (uc_link)
}

// Release the waiting threads whose barrier every thread of the warp (or block) has reached;
// false if none could go on.
inline bool emu_release(EmuBlock& block) {
  bool released = false;
  for (unsigned first = 0; first < block.threads; first += 32) {
    const unsigned end = std::min(first + 32, block.threads);
    bool complete = true;
    for (unsigned t = first; t < end; ++t) complete &= block.states[t] == EmuState::kWarp;
    if (complete) {
      std::fill(&block.states[first], &block.states[end - 1] + 1, EmuState::kRunnable);
      released = true;
    }
  }
  bool complete = true;
  for (unsigned t = 0; t < block.threads; ++t) complete &= block.states[t] == EmuState::kBlock;
  if (complete) {
    block.states.assign(block.threads, EmuState::kRunnable);
    released = true;
  }
  return released;
}

// Run `call(args)` (a kernel's trampoline) over the grid, one block after the other; returns
// 0, or 1 if the threads of a block wait at different barriers (the launch stops there).
extern "C" int emu_launch(void (*call)(void**), void** args, unsigned gx, unsigned gy,
                          unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  constexpr size_t kStack = 256 * 1024;
  gridDim = dim3{gx, gy, gz};
  blockDim = dim3{bx, by, bz};
  const unsigned threads = bx * by * bz, blocks = gx * gy * gz;
  static std::vector<std::unique_ptr<char[]>> stacks;  // kept for the next launches
  while (stacks.size() < threads) stacks.emplace_back(new char[kStack]);
  EmuBlock block;
  block.threads = threads;
  block.fibers.resize(threads);
  block.slots.resize(threads);
  emu_block = &block;
  emu_call = call;
  emu_args = args;
  for (unsigned b = 0; b < blocks; ++b) {
    blockIdx = dim3{b % gx, (b / gx) % gy, b / (gx * gy)};
    block.states.assign(threads, EmuState::kRunnable);
    for (unsigned t = 0; t < threads; ++t) {
      ucontext_t& fiber = block.fibers[t];
      getcontext(&fiber);
      fiber.uc_stack.ss_sp = stacks[t].get();
      fiber.uc_stack.ss_size = kStack;
      fiber.uc_link = &block.scheduler;
      makecontext(&fiber, emu_fiber, 0);
    }
    do {
      for (unsigned t = 0; t < threads; ++t) {
        if (block.states[t] != EmuState::kRunnable) continue;
        emu_thread = t;
        threadIdx = dim3{t % bx, (t / bx) % by, t / (bx * by)};
        swapcontext(&block.scheduler, &block.fibers[t]);
      }
    } while (emu_release(block));
    for (unsigned t = 0; t < threads; ++t) {
      if (block.states[t] != EmuState::kDone) {
        emu_block = nullptr;
        return 1;
      }
    }
  }
  emu_block = nullptr;
  return 0;
}
