// CHORUS_CPU_CLONES: compile a function for x86-64-v4 (AVX-512 F/BW/DQ/VL), AVX2 and the baseline,
// the one to run picked once when the library loads (GCC's target_clones, an ifunc). For hot
// loops over plain arrays that the baseline (SSE2) runs two doubles or four floats at a time.
//
// Only for code whose results do not depend on the clone: x86-64-v4 has FMA, and GCC contracts
// a * b + c into one rounding where it may, so a clone of code that multiplies and adds could give
// other bits than the baseline. (The Adam update, ops/training.cc, keeps its own AVX2-and-baseline
// clones for that reason: AVX2 there has no FMA.) A function holding an OpenMP region is not
// cloned as a whole (the region is outlined): clone the function the region calls.
//
// CHORUS_CPU_CLONES_NO_FMA: AVX2 and the baseline only, for code whose bits must not depend on the
// CPU (the Adam update, the bilinear resize's lerps, which equal TensorFlow's): GCC's "avx2" target
// has no FMA, so nothing is contracted in any clone.
//
// Empty elsewhere (other compilers and targets), and under TSan: the ifunc resolver runs during
// relocation, before the TSan runtime is up, and its instrumented entry crashes the process.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CHORUS_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define CHORUS_CPU_CLONES_NO_FMA __attribute__((target_clones("avx2", "default")))
#else
#define CHORUS_CPU_CLONES
#define CHORUS_CPU_CLONES_NO_FMA
#endif
