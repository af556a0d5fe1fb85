// Packing of A into MR-row micro-panels and B into NR-column micro-panels (k-major, zero-padded), with fp16
// inputs widened to fp32 on the way. Included only by the ISA translation units: every template takes the
// TU's own conversion policy `Cvt` (declared in an anonymous namespace), so each ISA gets private
// instantiations compiled with its own -m flags and none can leak into code that runs on a lesser CPU.
#pragma once

#include <cstdint>
#include <cstring>

namespace opbench {
namespace packing {

// Cvt must provide:
//   static float widen(uint16_t h);                                  one fp16 value
//   static void widen_row(const uint16_t* src, float* dst, int64_t n);  n contiguous fp16 values
//   static void narrow_row(const float* src, uint16_t* dst, int64_t n); round n values to fp16 (RNE)

template <class Cvt>
inline float to_f32(float x) { return x; }
template <class Cvt>
inline float to_f32(uint16_t x) { return Cvt::widen(x); }

template <int MR, class Cvt, class T>
void pack_a(const T* a, int64_t lda, int64_t m, int64_t k, float* dst) {
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const T* src = a + r0 * lda;
    const int64_t rows = (m - r0 < MR) ? (m - r0) : MR;
    if (rows == MR) {
      for (int64_t p = 0; p < k; ++p) {
        for (int i = 0; i < MR; ++i) dst[p * MR + i] = to_f32<Cvt>(src[i * lda + p]);
      }
    } else {
      for (int64_t p = 0; p < k; ++p) {
        for (int i = 0; i < MR; ++i) dst[p * MR + i] = (i < rows) ? to_f32<Cvt>(src[i * lda + p]) : 0.0f;
      }
    }
    dst += MR * k;
  }
}

template <int NR, class Cvt>
void pack_b(const float* b, int64_t ldb, int64_t k, int64_t n, float* dst) {
  for (int64_t p = 0; p < k; ++p) {
    float* d = dst + p * NR;
    std::memcpy(d, b + p * ldb, static_cast<size_t>(n) * sizeof(float));
    for (int64_t j = n; j < NR; ++j) d[j] = 0.0f;
  }
}

template <int NR, class Cvt>
void pack_b(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, float* dst) {
  for (int64_t p = 0; p < k; ++p) {
    float* d = dst + p * NR;
    Cvt::widen_row(b + p * ldb, d, n);
    for (int64_t j = n; j < NR; ++j) d[j] = 0.0f;
  }
}

// From B^T (n x k row-major): reads run along k, writes stride by NR.
template <int NR, class Cvt, class T>
void pack_bt(const T* bt, int64_t ldbt, int64_t k, int64_t n, float* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const T* src = bt + j * ldbt;
    for (int64_t p = 0; p < k; ++p) dst[p * NR + j] = to_f32<Cvt>(src[p]);
  }
  if (n < NR) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = n; j < NR; ++j) dst[p * NR + j] = 0.0f;
    }
  }
}

template <class Cvt>
void store_f16(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
  for (int64_t i = 0; i < m; ++i) Cvt::narrow_row(src + i * lds, dst + i * ldd, n);
}

// Instantiates the packing entry points of a KernelSet for one (MR, NR, Cvt).
template <int MR, int NR, class Cvt>
struct Packers {
  static void a_f32(const float* a, int64_t lda, int64_t m, int64_t k, float* dst) {
    pack_a<MR, Cvt>(a, lda, m, k, dst);
  }
  static void a_f16(const uint16_t* a, int64_t lda, int64_t m, int64_t k, float* dst) {
    pack_a<MR, Cvt>(a, lda, m, k, dst);
  }
  static void b_f32(const float* b, int64_t ldb, int64_t k, int64_t n, float* dst) {
    pack_b<NR, Cvt>(b, ldb, k, n, dst);
  }
  static void b_f16(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, float* dst) {
    pack_b<NR, Cvt>(b, ldb, k, n, dst);
  }
  static void bt_f32(const float* bt, int64_t ldbt, int64_t k, int64_t n, float* dst) {
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst);
  }
  static void bt_f16(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, float* dst) {
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst);
  }
  static void c_f16(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
    store_f16<Cvt>(src, lds, m, n, dst, ldd);
  }
};

}  // namespace packing
}  // namespace opbench
