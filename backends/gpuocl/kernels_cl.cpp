// The OpenCL C kernels of GpuOcl, compiled by the device's driver when the
// backend first compiles a partition; GEMM-shaped work too (gemm_*), so one
// program holds all the device code a partition runs and a `.bpk` can carry it.
// Shapes and strides come in a small __global int array ("meta") uploaded at
// compile time, so one kernel serves every rank up to kMaxRank.
#include "gpuocl/kernels.hpp"

namespace gpuocl {

const char* const kKernelSource = R"CLC(
#define MAXR 6

// Index of the element of an operand for output index i. meta layout:
// [rank, dims[rank], strides_a[rank], strides_b[rank]] (stride 0 = broadcast).
inline int bcast_offset(int i, __global const int* meta, int which) {
  const int rank = meta[0];
  int off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = meta[1 + d];
    const int idx = i % dim;
    i /= dim;
    off += idx * meta[1 + rank * (1 + which) + d];
  }
  return off;
}

inline float binary_op(int op, float a, float b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return pow(a, b);
    case 5: return fmax(a, b);
    case 6: return fmin(a, b);
    default: return b;  // 7: take b (broadcast copy)
  }
}

__kernel void binary_same(int op, __global const float* a, __global const float* b,
                          __global float* y, int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = binary_op(op, a[i], b[i]);
}

__kernel void binary_bcast(int op, __global const float* a, __global const float* b,
                           __global float* y, __global const int* meta, int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = binary_op(op, a[bcast_offset(i, meta, 0)], b[bcast_offset(i, meta, 1)]);
}

inline float unary_op(int op, float x, float p, float q) {
  switch (op) {
    case 0: return fmax(x, 0.0f);
    case 1: return 1.0f / (1.0f + exp(-x));
    case 2: return tanh(x);
    case 3: return exp(x);
    case 4: return log(x);
    case 5: return sqrt(x);
    case 6: return -x;
    case 7: return fabs(x);
    case 8: return erf(x);
    case 9: return fmin(fmax(x, p), q);               // Clip(min p, max q)
    case 10: return x >= 0.0f ? x : p * x;            // LeakyRelu(alpha p)
    case 11: return fmax(0.0f, fmin(1.0f, p * x + q)); // HardSigmoid
    case 12: return x * fmax(0.0f, fmin(1.0f, x / 6.0f + 0.5f)); // HardSwish
    case 13: return 1.0f / x;
    case 14: return x >= 0.0f ? x : p * (exp(x) - 1.0f); // Elu
    case 15: return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x)); // Softplus, no overflow
    case 16: return floor(x);
    case 17: return ceil(x);
    case 18: return x * p + q;                        // affine (Mul/Add by a scalar)
    default: return x;                                // identity
  }
}

__kernel void unary(int op, __global const float* x, __global float* y, int n, float p, float q) {
  const int i = get_global_id(0);
  if (i < n) y[i] = unary_op(op, x[i], p, q);
}

// Direct convolution, one output element per work-item: NCHW, groups,
// strides, pads, dilations; optional bias; activation as in unary (-1: none).
// shape: N C H W OC OH OW KH KW sh sw ph pw dh dw group
__kernel void conv2d(__global const float* x, __global const float* w, __global const float* bias,
                     __global float* y, __global const int* s, int has_bias, int act, float p,
                     float q) {
  const int N = s[0], C = s[1], H = s[2], W = s[3], OC = s[4], OH = s[5], OW = s[6];
  const int KH = s[7], KW = s[8], SH = s[9], SW = s[10], PH = s[11], PW = s[12];
  const int DH = s[13], DW = s[14], G = s[15];
  const int i = get_global_id(0);
  if (i >= N * OC * OH * OW) return;
  const int ow = i % OW, oh = (i / OW) % OH, oc = (i / (OW * OH)) % OC, n = i / (OW * OH * OC);
  const int cg = C / G, ocg = OC / G, g = oc / ocg;
  float acc = has_bias ? bias[oc] : 0.0f;
  for (int c = 0; c < cg; ++c) {
    __global const float* xc = x + ((n * C + g * cg + c) * H) * W;
    __global const float* wc = w + ((oc * cg + c) * KH) * KW;
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = oh * SH - PH + kh * DH;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow * SW - PW + kw * DW;
        if (iw < 0 || iw >= W) continue;
        acc += xc[ih * W + iw] * wc[kh * KW + kw];
      }
    }
  }
  y[i] = act >= 0 ? unary_op(act, acc, p, q) : acc;
}

// im2col of image n: cols[(c*KH + kh)*KW + kw][oh*OW + ow], shape as conv2d
// (G = 1). Work-item (row r = (c*KH + kh)*KW + kw, oh) writes the OW
// consecutive columns of output row oh: the index arithmetic once, not per
// element.
__kernel void im2col(__global const float* x, int x_offset, __global float* cols,
                     __global const int* s) {
  const int C = s[1], H = s[2], W = s[3], OH = s[5], OW = s[6];
  const int KH = s[7], KW = s[8], SH = s[9], SW = s[10], PH = s[11], PW = s[12];
  const int DH = s[13], DW = s[14];
  const int i = get_global_id(0);
  if (i >= C * KH * KW * OH) return;
  const int oh = i % OH, r = i / OH;
  const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
  const int ih = oh * SH - PH + kh * DH;
  __global float* out = cols + i * OW;
  if (ih < 0 || ih >= H) {
    for (int ow = 0; ow < OW; ++ow) out[ow] = 0.0f;
    return;
  }
  __global const float* row = x + x_offset + (c * H + ih) * W;
  const int w0 = kw * DW - PW;
  for (int ow = 0; ow < OW; ++ow) {
    const int iw = ow * SW + w0;
    out[ow] = (iw >= 0 && iw < W) ? row[iw] : 0.0f;
  }
}

// y[n][c][j] = act(y[n][c][j] + bias[c]) over N*C*HW elements.
__kernel void bias_act(__global float* y, __global const float* bias, int C, int HW, int n,
                       int has_bias, int act, float p, float q) {
  const int i = get_global_id(0);
  if (i >= n) return;
  float v = y[i] + (has_bias ? bias[(i / HW) % C] : 0.0f);
  y[i] = act >= 0 ? unary_op(act, v, p, q) : v;
}

// Max (mode 0) or average (1: pads excluded, 2: pads included) pooling.
// shape: N C H W OH OW KH KW sh sw ph pw dh dw
__kernel void pool2d(__global const float* x, __global float* y, __global const int* s, int mode) {
  const int N = s[0], C = s[1], H = s[2], W = s[3], OH = s[4], OW = s[5];
  const int KH = s[6], KW = s[7], SH = s[8], SW = s[9], PH = s[10], PW = s[11];
  const int DH = s[12], DW = s[13];
  const int i = get_global_id(0);
  if (i >= N * C * OH * OW) return;
  const int ow = i % OW, oh = (i / OW) % OH, nc = i / (OW * OH);
  __global const float* xc = x + nc * H * W;
  float acc = mode == 0 ? -INFINITY : 0.0f;
  int count = 0;
  for (int kh = 0; kh < KH; ++kh) {
    const int ih = oh * SH - PH + kh * DH;
    for (int kw = 0; kw < KW; ++kw) {
      const int iw = ow * SW - PW + kw * DW;
      const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
      if (mode == 2) {  // counts the pads up to the padded input's end
        if (ih < H + PH && iw < W + PW) ++count;
      } else if (inside) {
        ++count;
      }
      if (!inside) continue;
      const float v = xc[ih * W + iw];
      acc = mode == 0 ? fmax(acc, v) : acc + v;
    }
  }
  y[i] = mode == 0 ? acc : acc / (float)max(count, 1);
}

// Reduction of the middle axis of [outer, len, inner]: 0 mean, 1 sum, 2 max,
// 3 min, 4 product.
__kernel void reduce_mid(__global const float* x, __global float* y, int outer, int len, int inner,
                         int mode) {
  const int i = get_global_id(0);
  if (i >= outer * inner) return;
  const int o = i / inner, in = i % inner;
  __global const float* p = x + o * len * inner + in;
  float acc = mode == 2 ? -INFINITY : (mode == 3 ? INFINITY : (mode == 4 ? 1.0f : 0.0f));
  for (int k = 0; k < len; ++k) {
    const float v = p[k * inner];
    acc = mode == 2   ? fmax(acc, v)
          : mode == 3 ? fmin(acc, v)
          : mode == 4 ? acc * v
                      : acc + v;
  }
  y[i] = mode == 0 ? acc / (float)len : acc;
}

// Softmax (log_softmax if lg) over the middle axis of [outer, len, inner].
__kernel void softmax(__global const float* x, __global float* y, int outer, int len, int inner,
                      int lg) {
  const int i = get_global_id(0);
  if (i >= outer * inner) return;
  const int base = (i / inner) * len * inner + i % inner;
  float m = -INFINITY;
  for (int k = 0; k < len; ++k) m = fmax(m, x[base + k * inner]);
  float sum = 0.0f;
  for (int k = 0; k < len; ++k) sum += exp(x[base + k * inner] - m);
  for (int k = 0; k < len; ++k) {
    const float v = x[base + k * inner] - m;
    y[base + k * inner] = lg ? v - log(sum) : exp(v) / sum;
  }
}

// LayerNormalization over the last `cols` elements of each of `rows` rows.
__kernel void layernorm(__global const float* x, __global const float* scale,
                        __global const float* bias, __global float* y, int rows, int cols,
                        float eps, int has_bias) {
  const int r = get_global_id(0);
  if (r >= rows) return;
  __global const float* p = x + r * cols;
  float mean = 0.0f;
  for (int k = 0; k < cols; ++k) mean += p[k];
  mean /= (float)cols;
  float var = 0.0f;
  for (int k = 0; k < cols; ++k) var += (p[k] - mean) * (p[k] - mean);
  const float inv = 1.0f / sqrt(var / (float)cols + eps);
  for (int k = 0; k < cols; ++k)
    y[r * cols + k] = (p[k] - mean) * inv * scale[k] + (has_bias ? bias[k] : 0.0f);
}

// BatchNormalization (inference) folded at compile time into y = x*a[c] + b[c].
__kernel void channel_affine(__global const float* x, __global const float* ab, __global float* y,
                             int C, int HW, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int c = (i / HW) % C;
  y[i] = x[i] * ab[c] + ab[C + c];
}

// Transpose: meta = [rank, out dims[rank], input strides of each output axis[rank]].
__kernel void transpose(__global const float* x, __global float* y, __global const int* meta,
                        int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = x[bcast_offset(i, meta, 0)];
}

// Gather along the middle axis of data [outer, len, inner] with `count` indices.
__kernel void gather(__global const float* data, __global const long* idx, __global float* y,
                     int outer, int len, int inner, int count) {
  const int i = get_global_id(0);
  if (i >= outer * count * inner) return;
  const int in = i % inner, j = (i / inner) % count, o = i / (inner * count);
  long k = idx[j];
  if (k < 0) k += len;
  y[i] = (k >= 0 && k < len) ? data[(o * len + (int)k) * inner + in] : 0.0f;
}

// Slice/Pad share this: y[i] = x[off + sum(idx_d * stride_d)] or `value` when
// the source index of any axis falls outside [0, dim). meta = [rank, out dims,
// in dims, in strides, starts, steps].
__kernel void strided_copy(__global const float* x, __global float* y, __global const int* meta,
                           int n, float value) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int rank = meta[0];
  int rem = i, off = 0;
  bool inside = true;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = meta[1 + d];
    const int o = rem % dim;
    rem /= dim;
    const int src = meta[1 + 3 * rank + d] + o * meta[1 + 4 * rank + d];
    if (src < 0 || src >= meta[1 + rank + d]) inside = false;
    off += src * meta[1 + 2 * rank + d];
  }
  y[i] = inside ? x[off] : value;
}

// The input coordinate of output coordinate o (ONNX Resize's
// coordinate_transformation_mode): 0 half_pixel, 1 pytorch_half_pixel,
// 2 align_corners, 3 asymmetric. r = 1 / scale.
inline float resize_coord(int ctm, int o, float r, int in, int out) {
  switch (ctm) {
    case 0: return (o + 0.5f) * r - 0.5f;
    case 1: return out > 1 ? (o + 0.5f) * r - 0.5f : 0.0f;
    case 2: return out > 1 ? o * (float)(in - 1) / (float)(out - 1) : 0.0f;
    default: return o * r;
  }
}

// Resize of the two last axes of [NC, H, W]: nearest (mode 0, floor) or
// bilinear (mode 1, edges clamped).
__kernel void resize2d(__global const float* x, __global float* y, int NC, int H, int W, int OH,
                       int OW, int mode, int ctm, float rh, float rw) {
  const int i = get_global_id(0);
  if (i >= NC * OH * OW) return;
  const int ow = i % OW, oh = (i / OW) % OH, nc = i / (OW * OH);
  __global const float* p = x + nc * H * W;
  const float fy = resize_coord(ctm, oh, rh, H, OH), fx = resize_coord(ctm, ow, rw, W, OW);
  if (mode == 0) {
    const int ih = clamp((int)floor(fy), 0, H - 1), iw = clamp((int)floor(fx), 0, W - 1);
    y[i] = p[ih * W + iw];
    return;
  }
  const float cy = clamp(fy, 0.0f, (float)(H - 1)), cx = clamp(fx, 0.0f, (float)(W - 1));
  const int y0 = (int)floor(cy), x0 = (int)floor(cx);
  const int y1 = min(y0 + 1, H - 1), x1 = min(x0 + 1, W - 1);
  const float dy = cy - y0, dx = cx - x0;
  y[i] = (1 - dy) * ((1 - dx) * p[y0 * W + x0] + dx * p[y0 * W + x1]) +
         dy * ((1 - dx) * p[y1 * W + x0] + dx * p[y1 * W + x1]);
}
// --- integer and bool element-wise work (all broadcasting: meta as in
// binary_bcast, with a third stride set for Where) ---------------------------

// Integer Add/Sub/Mul wrap (two's complement, through the unsigned type);
// Div truncates toward zero, x/0 is 0 and x/-1 is -x wrapped, as CpuRef.
#define DEFINE_INT_BINARY(T, U, NAME)                                                          \
  inline T NAME##_op(int op, T a, T b) {                                                      \
    switch (op) {                                                                             \
      case 0: return (T)((U)a + (U)b);                                                        \
      case 1: return (T)((U)a - (U)b);                                                        \
      case 2: return (T)((U)a * (U)b);                                                        \
      case 3: return b == 0 ? (T)0 : b == (T)-1 ? (T)((U)0 - (U)a) : a / b;                   \
      case 5: return max(a, b);                                                               \
      default: return min(a, b);                                                              \
    }                                                                                         \
  }                                                                                           \
  __kernel void NAME(int op, __global const T* a, __global const T* b, __global T* y,         \
                     __global const int* meta, int n) {                                       \
    const int i = get_global_id(0);                                                           \
    if (i < n) y[i] = NAME##_op(op, a[bcast_offset(i, meta, 0)], b[bcast_offset(i, meta, 1)]); \
  }
DEFINE_INT_BINARY(int, uint, binary_i32)
DEFINE_INT_BINARY(long, ulong, binary_i64)

// Equal, Less, LessOrEqual, Greater, GreaterOrEqual (op 0..4) to bool (uchar).
#define DEFINE_COMPARE(T, NAME)                                                                \
  __kernel void NAME(int op, __global const T* a, __global const T* b, __global uchar* y,     \
                     __global const int* meta, int n) {                                       \
    const int i = get_global_id(0);                                                           \
    if (i >= n) return;                                                                       \
    const T x = a[bcast_offset(i, meta, 0)], z = b[bcast_offset(i, meta, 1)];                 \
    y[i] = op == 0 ? x == z : op == 1 ? x < z : op == 2 ? x <= z : op == 3 ? x > z : x >= z;  \
  }
DEFINE_COMPARE(float, compare_f32)
DEFINE_COMPARE(int, compare_i32)
DEFINE_COMPARE(long, compare_i64)
DEFINE_COMPARE(uchar, compare_bool)

// And, Or, Xor (op 0..2) of bools; Not.
__kernel void logic(int op, __global const uchar* a, __global const uchar* b, __global uchar* y,
                    __global const int* meta, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const uchar x = a[bcast_offset(i, meta, 0)] != 0, z = b[bcast_offset(i, meta, 1)] != 0;
  y[i] = op == 0 ? (x & z) : op == 1 ? (x | z) : (x ^ z);
}
__kernel void logic_not(__global const uchar* x, __global uchar* y, int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = x[i] == 0;
}

// Where(cond, x, y) by element size (the bits are moved, not interpreted).
#define DEFINE_WHERE(T, NAME)                                                                  \
  __kernel void NAME(__global const uchar* c, __global const T* a, __global const T* b,       \
                     __global T* y, __global const int* meta, int n) {                        \
    const int i = get_global_id(0);                                                           \
    if (i >= n) return;                                                                       \
    y[i] = c[bcast_offset(i, meta, 0)] ? a[bcast_offset(i, meta, 1)] : b[bcast_offset(i, meta, 2)]; \
  }
DEFINE_WHERE(uchar, where_1)
DEFINE_WHERE(uint, where_4)
DEFINE_WHERE(ulong, where_8)

// Cast between float32, int32, int64 and bool as ONNX and CpuRef do: float
// to integer truncates toward zero and saturates, NaN gives 0 (OpenCL's
// convert_*_sat_rtz); integer narrowing wraps; to bool is "!= 0".
#define DEFINE_CAST(FROM, TO, NAME, EXPR)                                                      \
  __kernel void NAME(__global const FROM* x, __global TO* y, int n) {                         \
    const int i = get_global_id(0);                                                           \
    if (i < n) {                                                                              \
      const FROM v = x[i];                                                                    \
      y[i] = EXPR;                                                                            \
    }                                                                                         \
  }
DEFINE_CAST(float, int, cast_f32_i32, convert_int_sat_rtz(v))
DEFINE_CAST(float, long, cast_f32_i64, convert_long_sat_rtz(v))
DEFINE_CAST(float, uchar, cast_f32_bool, v != 0.0f)
DEFINE_CAST(int, float, cast_i32_f32, (float)v)
DEFINE_CAST(int, long, cast_i32_i64, (long)v)
DEFINE_CAST(int, uchar, cast_i32_bool, v != 0)
DEFINE_CAST(long, float, cast_i64_f32, (float)v)
DEFINE_CAST(long, int, cast_i64_i32, (int)v)
DEFINE_CAST(long, uchar, cast_i64_bool, v != 0)
DEFINE_CAST(uchar, float, cast_bool_f32, v != 0 ? 1.0f : 0.0f)
DEFINE_CAST(uchar, int, cast_bool_i32, v != 0 ? 1 : 0)
DEFINE_CAST(uchar, long, cast_bool_i64, v != 0 ? 1L : 0L)

// float16 tensors, stored as half and computed in float through the core
// vload_half / vstore_half_rte (no cl_khr_fp16 needed): element-wise
// arithmetic and activations, and Cast to and from float32.
__kernel void binary_f16(int op, __global const half* a, __global const half* b, __global half* y,
                         __global const int* meta, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const float x = vload_half(bcast_offset(i, meta, 0), a);
  const float z = vload_half(bcast_offset(i, meta, 1), b);
  vstore_half_rte(binary_op(op, x, z), i, y);
}
__kernel void unary_f16(int op, __global const half* x, __global half* y, int n, float p, float q) {
  const int i = get_global_id(0);
  if (i < n) vstore_half_rte(unary_op(op, vload_half(i, x), p, q), i, y);
}
__kernel void cast_f16_f32(__global const half* x, __global float* y, int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = vload_half(i, x);
}
__kernel void cast_f32_f16(__global const float* x, __global half* y, int n) {
  const int i = get_global_id(0);
  if (i < n) vstore_half_rte(x[i], i, y);
}

// Row-major C = alpha * op(A) op(B) + beta * C, C m x n; op(A)(i,p) and
// op(B)(p,j) as the suffix says (n: as stored, t: transposed). Work-item
// (j0/16, i0/8) computes the 8 x 16 block of C at row i0, column j0: 16
// columns in one float16 (one AVX-512 register on a CPU driver, which is
// what PoCL runs best: it vectorizes explicit vector types better than
// scalar code across work-items), each A element broadcast to them.
// Columns past n are read clamped and not written. Offsets are in elements.
#define GEMM_TM 8
#define GEMM_TN 16
inline float16 gemm_row_n(__global const float* B, int ldb, int p, int j0, int n) {
  if (j0 + GEMM_TN <= n) return vload16(0, B + p * ldb + j0);
  float t[GEMM_TN];
  for (int q = 0; q < GEMM_TN; ++q) t[q] = B[p * ldb + min(j0 + q, n - 1)];
  return vload16(0, t);
}
inline float16 gemm_row_t(__global const float* B, int ldb, int p, int j0, int n) {
  float t[GEMM_TN];
  for (int q = 0; q < GEMM_TN; ++q) t[q] = B[min(j0 + q, n - 1) * ldb + p];
  return vload16(0, t);
}
#define DEFINE_GEMM(NAME, AIDX, BROW)                                                        \
  __kernel void NAME(int m, int n, int k, float alpha, float beta, __global const float* A,  \
                     int a_off, int lda, __global const float* B, int b_off, int ldb,         \
                     __global float* C, int c_off, int ldc) {                                 \
    const int j0 = get_global_id(0) * GEMM_TN, i0 = get_global_id(1) * GEMM_TM;              \
    if (j0 >= n || i0 >= m) return;                                                          \
    A += a_off;                                                                               \
    B += b_off;                                                                               \
    C += c_off;                                                                               \
    float16 acc[GEMM_TM];                                                                     \
    int row[GEMM_TM];                                                                         \
    for (int r = 0; r < GEMM_TM; ++r) {                                                       \
      acc[r] = (float16)(0.0f);                                                               \
      row[r] = min(i0 + r, m - 1);                                                            \
    }                                                                                         \
    for (int p = 0; p < k; ++p) {                                                             \
      const float16 b = BROW(B, ldb, p, j0, n);                                               \
      for (int r = 0; r < GEMM_TM; ++r) acc[r] += A[AIDX] * b;                                \
    }                                                                                         \
    for (int r = 0; r < GEMM_TM && i0 + r < m; ++r) {                                         \
      float t[GEMM_TN];                                                                       \
      vstore16(acc[r], 0, t);                                                                 \
      __global float* c = C + (i0 + r) * ldc + j0;                                            \
      for (int q = 0; q < GEMM_TN && j0 + q < n; ++q)                                         \
        c[q] = beta == 0.0f ? alpha * t[q] : alpha * t[q] + beta * c[q];                      \
    }                                                                                         \
  }
DEFINE_GEMM(gemm_nn, row[r] * lda + p, gemm_row_n)
DEFINE_GEMM(gemm_nt, row[r] * lda + p, gemm_row_t)
DEFINE_GEMM(gemm_tn, p * lda + row[r], gemm_row_n)
DEFINE_GEMM(gemm_tt, p * lda + row[r], gemm_row_t)
)CLC";

}  // namespace gpuocl
