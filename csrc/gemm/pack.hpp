// Packing of A into MR-row micro-panels and B into NR-column micro-panels (k-major, zero-padded), with fp16
// inputs widened to fp32 on the way. Included only by the ISA translation units: every template takes the
// TU's own conversion policy `Cvt` (declared in an anonymous namespace), so each ISA gets private
// instantiations compiled with its own -m flags and none can leak into code that runs on a lesser CPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "opbench/kernel_set.hpp"

namespace opbench {
namespace packing {

// Cvt must provide:
//   static float widen(uint16_t h);                                  one fp16 value
//   static void widen_row(const uint16_t* src, float* dst, int64_t n);  n contiguous fp16 values
//   static void narrow_row(const float* src, uint16_t* dst, int64_t n); round n values to fp16 (RNE)
// A Cvt with `static constexpr bool kBf16 = true` reads its 16-bit sources as bf16 instead (widen and
// widen_row then widen bf16; the AVX-512 transposes below shift where they would convert fp16).

template <class Cvt, class = void>
struct WidensBf16 : std::false_type {};
template <class Cvt>
struct WidensBf16<Cvt, std::void_t<decltype(Cvt::kBf16)>> : std::bool_constant<Cvt::kBf16> {};

// A source element as a panel element: fp32 panels widen fp16 sources; panels of the source's own type
// (fp32 from fp32, or fp16 kept for the fp16-accumulating kernels) copy it.
template <class Cvt, class D, class T>
D panel_value(T x) {
  if constexpr (sizeof(D) == sizeof(T)) {
    return x;
  } else {
    return Cvt::widen(x);
  }
}

#if defined(__AVX512F__)
// The first n of 16 lanes (none for n <= 0, all for n >= 16): masked loads and stores of a row's last
// vector.
template <class Cvt>
__mmask16 lanes_mask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : (n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1u));
}

// out[j][i] = r[i][j]: a 16x16 transpose in registers (unpack pairs of rows, then 4-float and 128-bit lane
// shuffles). Templated on Cvt like everything here, to stay private to its unit.
template <class Cvt>
void transpose16(const __m512 r[16], __m512 out[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + c], 128-bit lane L: column 4L + c of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    out[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    out[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    out[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    out[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// 16 consecutive values of `rows` <= 16 rows (src, ld apart; fp16 widened; rows past `rows` read as zeros)
// transposed into 16 fp32 rows of dst, ld_dst apart (or at dst + row_dst[j] when row_dst is given), of which
// the first `store` floats are written: one load per row, one transpose, 16 (masked) stores instead of
// 16 * rows scalar copies. Packing A from rows, or B from B^T, is such a transpose; when each packed element
// is used only a few times (N of 16-32), doing it element by element cost as much as the product.
// With `nonfinite`, every value read is added to it: it is NaN or Inf once a NaN or Inf was read (or, harmlessly
// for its one use, when finite values overflow the sum: conv2d_pixels.cpp then multiplies the padding taps).
template <class Cvt, class T>
void transpose_16_columns(const T* src, int64_t ld, int rows, float* dst, int64_t ld_dst, int store,
                          const int64_t* row_dst = nullptr, __m512* nonfinite = nullptr) {
  __m512 r[16], out[16];
  for (int i = 0; i < 16; ++i) {
    if (i >= rows) {
      r[i] = _mm512_setzero_ps();
    } else if constexpr (sizeof(T) == 4) {
      r[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(src + i * ld));
    } else if constexpr (WidensBf16<Cvt>::value) {  // bf16: its bits are an fp32's top half
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * ld));
      r[i] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      r[i] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * ld)));
    }
  }
  if (nonfinite != nullptr) {  // a tree of adds, not one chain through every load
    __m512 t[8];
    for (int i = 0; i < 8; ++i) t[i] = _mm512_add_ps(r[i], r[i + 8]);
    for (int i = 0; i < 4; ++i) t[i] = _mm512_add_ps(t[i], t[i + 4]);
    *nonfinite = _mm512_add_ps(*nonfinite, _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3])));
  }
  transpose16<Cvt>(r, out);
  const __mmask16 mask = lanes_mask<Cvt>(store);
  for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(dst + (row_dst ? row_dst[j] : j * ld_dst), mask, out[j]);
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// t[j] = column j of the 8x8 block at c (rows ldc apart; row i < rows, row 0 again past them): eight row
// loads and the register transpose (unpack, shuffle, swap halves).
template <class Cvt>
[[gnu::always_inline]] inline void transpose_8x8_regs(const float* c, int64_t ldc, int rows, __m256* t) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(c + (i < rows ? i : 0) * ldc);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);  // columns 0, 1 | 4, 5 of rows i, i + 1, interleaved
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // columns 2, 3 | 6, 7
  }
  for (int h = 0; h < 8; h += 4) {  // rows h .. h + 3 of columns j | j + 4 in r[h / 4 * 4 + j]
    r[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
    t[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
  }
}
#endif

template <int MR, class Cvt, class T, class D>
void pack_a(const T* a, int64_t lda, int64_t m, int64_t k, D* dst) {
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const T* src = a + r0 * lda;
    const int64_t rows = (m - r0 < MR) ? (m - r0) : MR;
    int64_t p = 0;
#if defined(__AVX512F__)
    if constexpr (sizeof(D) == 4 && MR <= 16) {
      // (a panel of fewer rows too: the transpose reads only `rows` rows and zero-fills the rest; the unpacked
      // path packs tiles of 12 rows in MR = 14 panels, gemm_unpacked_b)
      for (; p + 16 <= k; p += 16) {
        // The next MR rows' same columns, asked for while these are transposed: A's rows are MR short
        // streams the hardware prefetchers do not follow; a block ahead, each line has the time of a
        // block's transposes to arrive (rows past A's end are a hint that touches nothing).
        for (int i = 0; i < MR; ++i) __builtin_prefetch(src + (i + MR) * lda + p, 0, 2);
        transpose_16_columns<Cvt>(src + p, lda, static_cast<int>(rows), dst + p * MR, MR, MR);
      }
    }
#elif defined(__AVX2__)
    if constexpr (sizeof(T) == 4 && sizeof(D) == 4 && MR == 6) {
      // A whole panel of fp32 rows, 8 of k at a time through the 8x8 register transpose (its rows past MR
      // are row 0 again, never stored), each step's 6 values stored as 4 + 2: element by element this
      // was one load and one store per float.
      for (; rows == MR && p + 8 <= k; p += 8) {
        for (int i = 0; i < MR; ++i) __builtin_prefetch(src + (i + MR) * lda + p, 0, 2);
        __m256 t[8];
        transpose_8x8_regs<Cvt>(reinterpret_cast<const float*>(src) + p, lda, MR, t);
        float* d = reinterpret_cast<float*>(dst) + p * MR;
        for (int j = 0; j < 8; ++j) {
          _mm_storeu_ps(d + j * MR, _mm256_castps256_ps128(t[j]));
          _mm_storel_pi(reinterpret_cast<__m64*>(d + j * MR + 4), _mm256_extractf128_ps(t[j], 1));
        }
      }
    }
#endif
    for (; p < k; ++p) {
      for (int i = 0; i < MR; ++i) dst[p * MR + i] = (i < rows) ? panel_value<Cvt, D>(src[i * lda + p]) : D{0};
    }
    dst += MR * k;
  }
}

// Same-type rows (fp32 to fp32 panels, or fp16 to the fp16 panels of the fp16-accumulating kernels).
template <int NR, class Cvt, class T>
void pack_b(const T* b, int64_t ldb, int64_t k, int64_t n, T* dst) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4 && NR % 16 == 0) {
    // A row is NR / 16 vectors (masked past n, which zero-fills the padding): a memcpy call per row of 32
    // floats cost more than the copy, 0.44 cycles a float at 96^3 on an Emerald Rapids core; this, 0.1.
    __mmask16 mask[NR / 16];
    for (int j = 0; j < NR / 16; ++j) mask[j] = lanes_mask<Cvt>(static_cast<int>(n) - j * 16);
    for (int64_t p = 0; p < k; ++p) {
      const float* s = reinterpret_cast<const float*>(b + p * ldb);
      float* d = reinterpret_cast<float*>(dst + p * NR);
      for (int j = 0; j < NR / 16; ++j) _mm512_storeu_ps(d + j * 16, _mm512_maskz_loadu_ps(mask[j], s + j * 16));
    }
    return;
  }
#elif defined(__AVX2__)
  if constexpr (sizeof(T) == 4 && NR % 8 == 0) {
    if (n == NR) {  // a whole panel: NR / 8 vectors a row, not a memcpy call
      for (int64_t p = 0; p < k; ++p) {
        const float* s = reinterpret_cast<const float*>(b + p * ldb);
        float* d = reinterpret_cast<float*>(dst + p * NR);
        for (int j = 0; j < NR / 8; ++j) _mm256_storeu_ps(d + j * 8, _mm256_loadu_ps(s + j * 8));
      }
      return;
    }
  }
#endif
  for (int64_t p = 0; p < k; ++p) {
    T* d = dst + p * NR;
    std::memcpy(d, b + p * ldb, static_cast<size_t>(n) * sizeof(T));
    for (int64_t j = n; j < NR; ++j) d[j] = T{0};
  }
}

// Whole micro-panels [0, panels) of fp32 B, a row at a time (PackBPanelsF32 in kernel_set.hpp).
template <int NR>
void pack_b_panels(const float* b, int64_t ldb, int64_t k, int64_t panels, float* dst, int64_t ahead) {
  constexpr int64_t kLine = 64 / sizeof(float);
  const int64_t width = panels * NR;
  for (int64_t p = 0; p < k; ++p) {
    const float* s = b + p * ldb;
    if (ahead > 0) {
      for (int64_t j = 0; j < width; j += kLine) __builtin_prefetch(s + ahead + j, 0, 1);
    }
    for (int64_t l = 0; l < panels; ++l) {
      float* d = dst + (l * k + p) * NR;  // (panels and their rows whole vectors apart)
#if defined(__AVX512F__)
      if constexpr (NR % 16 == 0) {
        for (int j = 0; j < NR; j += 16) _mm512_store_ps(d + j, _mm512_loadu_ps(s + l * NR + j));
        continue;
      }
#elif defined(__AVX2__)
      if constexpr (NR % 8 == 0) {
        for (int j = 0; j < NR; j += 8) _mm256_store_ps(d + j, _mm256_loadu_ps(s + l * NR + j));
        continue;
      }
#endif
      std::memcpy(d, s + l * NR, sizeof(float) * NR);
    }
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

// From B^T (n x k row-major): reads run along k, writes stride by NR. On AVX-512, fp32 panels are written 16
// rows of B^T by 16 of k at a time through the 16x16 transpose (conv2d with pixels as rows packs all of W^T,
// 9.4 MB at 512 -> 512 3x3, every call: element by element that took 40% of the call at 7x7). With row_dst,
// panel row p (NR values) goes to dst + row_dst[p] instead of dst + p * NR: conv2d_pixels packs W^T with its
// K in another order than W's (filter column major) and in K blocks, in this same pass.
// With `nonfinite` (fp32 panels), it is set when a value read is NaN or Inf (and left alone otherwise; the
// AVX-512 path may also set it when the sum of finite values it keeps overflows).
template <int NR, class Cvt, class T, class D>
void pack_bt(const T* bt, int64_t ldbt, int64_t k, int64_t n, D* dst, const int64_t* row_dst = nullptr,
             bool* nonfinite = nullptr) {
  auto row = [&](int64_t p) { return dst + (row_dst ? row_dst[p] : p * NR); };
  // Columns [0, j_vec) of panel rows [0, p_vec) are written by the vector transposes; the loops below do
  // the rest (and zero the padding columns past n).
  int64_t p_vec = 0, j_vec = 0;
#if defined(__AVX512F__)
  if constexpr (sizeof(D) == 4 && NR % 16 == 0) {
    const int64_t k16 = k / 16 * 16;
    __m512 check = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < NR; j0 += 16) {  // 16 rows of B^T at a time: 16 read streams, not NR
      // Rows of B^T past n become zero columns of the panel: all 16 floats of each panel row are stored.
      const int rows = static_cast<int>(n - j0 < 0 ? 0 : (n - j0 < 16 ? n - j0 : 16));
      for (int64_t p0 = 0; p0 < k16; p0 += 16) {
        transpose_16_columns<Cvt>(bt + j0 * ldbt + p0, ldbt, rows,
                                  reinterpret_cast<float*>(row_dst ? dst + j0 : row(p0) + j0), NR, 16,
                                  row_dst ? row_dst + p0 : nullptr, nonfinite != nullptr ? &check : nullptr);
      }
    }
    if (nonfinite != nullptr && _mm512_cmp_ps_mask(_mm512_sub_ps(check, check), _mm512_setzero_ps(), _CMP_EQ_OQ) != 0xffff) {
      *nonfinite = true;
    }
    p_vec = k16;
    j_vec = NR;
  }
#elif defined(__AVX2__)
  if constexpr (sizeof(D) == 4 && sizeof(T) == 4 && NR % 8 == 0) {
    // Whole groups of 8 rows of B^T, 8 of k at a time, through the 8x8 register transpose: element by
    // element this was a strided store a float (an LSTM's weights, conv2d's W^T with pixels as rows).
    const int64_t k8 = k / 8 * 8;
    __m256 check = _mm256_setzero_ps();
    for (; j_vec + 8 <= n; j_vec += 8) {
      for (int64_t p0 = 0; p0 < k8; p0 += 8) {
        __m256 t[8];
        transpose_8x8_regs<Cvt>(reinterpret_cast<const float*>(bt) + j_vec * ldbt + p0, ldbt, 8, t);
        for (int c = 0; c < 8; ++c) {
          _mm256_storeu_ps(reinterpret_cast<float*>(row(p0 + c)) + j_vec, t[c]);
          if (nonfinite != nullptr) check = _mm256_add_ps(check, t[c]);
        }
      }
    }
    if (nonfinite != nullptr &&
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(check, check), _mm256_setzero_ps(), _CMP_EQ_OQ)) != 0xff) {
      *nonfinite = true;
    }
    p_vec = k8;
  }
#endif
  for (int64_t j = 0; j < n; ++j) {
    const T* src = bt + j * ldbt;
    for (int64_t p = j < j_vec ? p_vec : 0; p < k; ++p) {
      const D v = panel_value<Cvt, D>(src[p]);
      if constexpr (sizeof(D) == 4) {
        if (nonfinite != nullptr && !(v - v == 0.0f)) *nonfinite = true;
      }
      row(p)[j] = v;
    }
  }
  for (int64_t j = n; j < NR; ++j) {
    for (int64_t p = j < j_vec ? p_vec : 0; p < k; ++p) row(p)[j] = D{0};
  }
}

// From A^T (k x m row-major): each MR-row micro-panel is packed like an MR-column panel of B (rows of A^T
// copied along m, fp16 widened), zero-padded past m.
template <int MR, class Cvt, class T>
void pack_at(const T* at, int64_t ldat, int64_t m, int64_t k, float* dst) {
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    pack_b<MR, Cvt>(at + r0, ldat, k, (m - r0 < MR) ? (m - r0) : MR, dst);
    dst += MR * k;
  }
}

template <class Cvt>
void store_f16(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
  for (int64_t i = 0; i < m; ++i) Cvt::narrow_row(src + i * lds, dst + i * ldd, n);
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// y[j * ldy + i] = c[i * ldc + j] for i < rows <= 8, j < 8: eight stores of `rows` lanes.
template <class Cvt>
void transpose_8x8(const float* c, int64_t ldc, int rows, float* y, int64_t ldy) {
  __m256 t[8];
  transpose_8x8_regs<Cvt>(c, ldc, rows, t);
  if (rows == 8) {
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(y + j * ldy, t[j]);
    return;
  }
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(y + j * ldy, mask, t[j]);
}
#endif

// y[j * ldy + i] = c[i * ldc + j] for i < rows, j < cols (both at most 16): on AVX-512 a whole 16-column block
// is one transpose_16_columns (16 loads, the register transpose, 16 masked stores), on AVX2 8x8 blocks
// (transpose_8x8), instead of rows x 16 strided scalar copies. These copies took 11% of the 7x7 stride-2 stem
// (pixels as rows, batch 8, 2 Zen 4 cores without AVX-512) before the AVX2 blocks.
template <class Cvt>
void store_transposed(const float* c, int64_t ldc, int rows, int cols, float* y, int64_t ldy) {
  int j0 = 0;
#if defined(__AVX512F__)
  if (cols == 16) {
    transpose_16_columns<Cvt>(c, ldc, rows, y, ldy, rows);
    return;
  }
#elif defined(__AVX2__)
  for (; j0 + 8 <= cols; j0 += 8) {
    for (int i = 0; i < rows; i += 8) {
      transpose_8x8<Cvt>(c + i * ldc + j0, ldc, rows - i < 8 ? rows - i : 8, y + j0 * ldy + i, ldy);
    }
  }
#endif
  for (int j = j0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) y[j * ldy + i] = c[i * ldc + j];
  }
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// store_transposed of a whole 16-row block with non-temporal stores: y[j * ldy + i] = c[i * ldc + j] for
// i < 16, j < cols <= 16, each of y's rows one full cache line (y and ldy multiples of 64 bytes) written by
// two adjacent streaming stores, so the line is not read before it is written; columns past the last
// multiple of 8 go through store_transposed, the cache. The caller fences (sfence) before others read y.
template <class Cvt>
void stream_transposed(const float* c, int64_t ldc, int cols, float* y, int64_t ldy) {
  int j0 = 0;
  for (; j0 + 8 <= cols; j0 += 8) {
    __m256 lo[8], hi[8];
    transpose_8x8_regs<Cvt>(c + j0, ldc, 8, lo);
    transpose_8x8_regs<Cvt>(c + 8 * ldc + j0, ldc, 8, hi);
    for (int j = 0; j < 8; ++j) {
      _mm256_stream_ps(y + (j0 + j) * ldy, lo[j]);
      _mm256_stream_ps(y + (j0 + j) * ldy + 8, hi[j]);
    }
  }
  if (j0 < cols) store_transposed<Cvt>(c + j0, ldc, 16, cols - j0, y + j0 * ldy, ldy);
}
#endif

// Copies n <= NR contiguous floats (a run of a gathered row): one masked load/store per 16 on AVX-512, where
// a memcpy call would cost more than the copy itself. (Templated on the unit's Cvt like everything here, so
// each ISA keeps its own instantiation.)
template <class Cvt>
void copy_run(const float* src, float* dst, int n) {
#if defined(__AVX512F__)
  for (int i = 0; i < n; i += 16) {
    const __mmask16 mask = lanes_mask<Cvt>(n - i);
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_maskz_loadu_ps(mask, src + i));
  }
#elif defined(__AVX2__)
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
#endif
}

// Every second float of a run (stride 2, e.g. a strided convolution): two loads and one permute per 16 on
// AVX-512, two loads, a shuffle and a permute per 8 on AVX2.
template <class Cvt>
void copy_run_step2(const float* src, float* dst, int n) {
  int i = 0;
#if defined(__AVX512F__)
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (; i + 16 <= n; i += 16) {
    const __m512 lo = _mm512_loadu_ps(src + 2 * i), hi = _mm512_loadu_ps(src + 2 * i + 16);
    _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, even, hi));
  }
#elif defined(__AVX2__)
  // Eight at a time from floats 0..14 of src + 2i (no read past the last float used): the even floats of the
  // first load and the odd ones of the second (loaded one float later), per 128-bit lane, then the lanes'
  // halves put in order. Element by element the stride-2 gather of the columns way cost about an eighth of the
  // FMA time of a 3x3 at stride 2 with 128 output channels (a load and a store per float against 128 FMA lanes).
  for (; i + 8 <= n; i += 8) {
    const __m256 lo = _mm256_loadu_ps(src + 2 * i), hi = _mm256_loadu_ps(src + 2 * i + 7);
    const __m256 mixed = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 2, 0));  // s0 s2 s8 s10 | s4 s6 s12 s14
    const __m256d pairs = _mm256_permute4x64_pd(_mm256_castps_pd(mixed), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_ps(dst + i, _mm256_castpd_ps(pairs));
  }
#endif
  for (; i < n; ++i) dst[i] = src[2 * i];
}

template <int NR, class Cvt>
void pack_b_gather(int64_t k, const float* base, const int64_t* row_off, const GatherRun* runs, int nruns,
                   float* dst) {
  // Run by run down the rows: a contiguous run of at most 16 floats (every run of a 14- or 16-wide panel,
  // most of a 32-wide one) is one masked load and store per row, its mask made once.
  for (int r = 0; r < nruns; ++r) {
    const GatherRun& run = runs[r];
    float* out = dst + run.col;
#if defined(__AVX512F__)
    if (run.step == 1 && run.len <= 16) {
      const __mmask16 mask = static_cast<__mmask16>((1u << run.len) - 1u);
      const float* src = base + run.off;
      for (int64_t p = 0; p < k; ++p) {
        _mm512_mask_storeu_ps(out + p * NR, mask, _mm512_maskz_loadu_ps(mask, src + row_off[p]));
      }
      continue;
    }
#endif
    for (int64_t p = 0; p < k; ++p) {
      const float* row = base + row_off[p];
      float* d = out + p * NR;
      if (run.step == 1) {
        copy_run<Cvt>(row + run.off, d, run.len);
      } else if (run.step == 0) {
        for (int i = 0; i < run.len; ++i) d[i] = 0.0f;
      } else if (run.step == 2) {
        copy_run_step2<Cvt>(row + run.off, d, run.len);
      } else {
        const float* src = row + run.off;
        for (int i = 0; i < run.len; ++i) d[i] = src[static_cast<int64_t>(i) * run.step];
      }
    }
  }
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
  static void at_f32(const float* at, int64_t ldat, int64_t m, int64_t k, float* dst) {
    pack_at<MR, Cvt>(at, ldat, m, k, dst);
  }
  static void at_f16(const uint16_t* at, int64_t ldat, int64_t m, int64_t k, float* dst) {
    pack_at<MR, Cvt>(at, ldat, m, k, dst);
  }
  static void b_f32(const float* b, int64_t ldb, int64_t k, int64_t n, float* dst) {
    pack_b<NR, Cvt>(b, ldb, k, n, dst);
  }
  static void b_f16(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, float* dst) {
    pack_b<NR, Cvt>(b, ldb, k, n, dst);
  }
  static void b_panels_f32(const float* b, int64_t ldb, int64_t k, int64_t panels, float* dst, int64_t ahead) {
    pack_b_panels<NR>(b, ldb, k, panels, dst, ahead);
  }
  static void bt_f32(const float* bt, int64_t ldbt, int64_t k, int64_t n, float* dst) {
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst);
  }
  static void bt_f16(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, float* dst) {
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst);
  }
  static bool bt_rows_f32(const float* bt, int64_t ldbt, int64_t k, int64_t n, const int64_t* row_dst, float* dst) {
    bool nonfinite = false;
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst, row_dst, &nonfinite);
    return nonfinite;
  }
  static bool bt_rows_f16(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, const int64_t* row_dst,
                          float* dst) {
    bool nonfinite = false;
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst, row_dst, &nonfinite);
    return nonfinite;
  }
  static void store_transposed(const float* c, int64_t ldc, int rows, int cols, float* y, int64_t ldy) {
    packing::store_transposed<Cvt>(c, ldc, rows, cols, y, ldy);
  }
  static void c_f16(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
    store_f16<Cvt>(src, lds, m, n, dst, ldd);
  }
  static void b_gather(int64_t k, const float* base, const int64_t* row_off, const GatherRun* runs, int nruns,
                       float* dst) {
    pack_b_gather<NR, Cvt>(k, base, row_off, runs, nruns, dst);
  }
  // An MR-row micro-panel of A gathered the same way (conv2d with output pixels as the GEMM's rows: the
  // runs cover pixels [0, MR) and row p of the panel, MR floats, is filter tap p).
  static void a_gather(int64_t k, const float* base, const int64_t* row_off, const GatherRun* runs, int nruns,
                       float* dst) {
    pack_b_gather<MR, Cvt>(k, base, row_off, runs, nruns, dst);
  }
  // fp16 panels kept in fp16, for the fp16-accumulating kernels: the same layouts with 2-byte elements.
  static void a_h(const uint16_t* a, int64_t lda, int64_t m, int64_t k, uint16_t* dst) {
    pack_a<MR, Cvt>(a, lda, m, k, dst);
  }
  static void b_h(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, uint16_t* dst) {
    pack_b<NR, Cvt>(b, ldb, k, n, dst);
  }
  static void bt_h(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, uint16_t* dst) {
    pack_bt<NR, Cvt>(bt, ldbt, k, n, dst);
  }
};

}  // namespace packing
}  // namespace opbench
