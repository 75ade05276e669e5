/*
 * mage_ops: the learner's row-wise hot paths in C, next to the OpenBLAS GEMM of mage_blas.c.
 * Each function mirrors one in src/model/ops.ts or src/model/transformer.ts (same arguments,
 * same results up to float32 rounding); src/model/kernels/native.ts exposes them as
 * `Kernels.ops`, and the TypeScript versions stay the reference used by the other kernels.
 *
 *   rmsNormForward(x, g, y, rstd, rows, d, eps)
 *   rmsNormBackward(dy, x, g, rstd, dx, dg, rows, d)                 dx, dg accumulated
 *   swigluForward(gate, up, sig, out, n) / swigluBackward(dOut, gate, sig, up, dGate, dUp, n)
 *   rope(x, offsets, lengths, nHeads, headDim, cos, sin, inverse)     in place, every sequence
 *   attentionForward(q, k, v, attn, lse, S, offsets, lengths, nHeads, headDim, scale)
 *   attentionBackward(q, k, v, lse, dAttn, dq, dk, dv, P, dP, offsets, lengths, nHeads, headDim, scale)
 *   headForward(z, zOff, rows, V, targets, tOff, logp, entropy, lse, sOff)   z (logits) unchanged
 *   headBackward(z, zOff, rows, V, targets, tOff, lse, entropy, dLogp, dEntropy, sOff)   z := dLoss/dz
 *   adamw(p, g, m, v, off, n, beta1, beta2, stepSize, sqrtBc2, eps, gradScale, decay)
 *                           elements [off, off + n): p *= decay, then the AdamW step, float64 as adamw.ts
 *   sumSquares(a) -> number  (float64 accumulation)
 *   attendDecode(q, qOff, K, V, kvOff, headStride, len, nHeads, headDim, scale, out, outOff, scratch)
 *                           one query row against a head-major KV cache (the sampler's decode step)
 *   causalSoftmax(s, rows, len, first)
 *                           in place on rows × len scores: row i keeps its first (first + i) entries,
 *                           softmaxed, and zeroes the rest (the sampler's prefill block)
 *
 * Every typed array is checked for type and length against the sizes the call addresses, so a
 * bad call throws instead of touching memory outside the arrays. exp is a polynomial
 * (Cephes expf, about 1 ulp) that the compiler vectorises; hot loops are compiled for AVX2
 * and for baseline x86-64 and picked at load time (target_clones).
 */
#include <math.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern void cblas_sgemm(int order, int transA, int transB, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

/* Denormals flushed to zero while a kernel runs (and the caller's mode restored after): a
 * vectorised loop may multiply by a denormal constant in lanes it then discards, and every such
 * multiply costs a ~150-cycle microcode assist. Values below 1.2e-38 do not matter here. */
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
typedef unsigned int FpMode;
static FpMode fp_fast(void) {
  FpMode old = _mm_getcsr();
  _mm_setcsr(old | 0x8040); /* FTZ | DAZ */
  return old;
}
static void fp_restore(FpMode old) { _mm_setcsr(old); }
#else
typedef int FpMode;
static FpMode fp_fast(void) { return 0; }
static void fp_restore(FpMode old) { (void)old; }
#endif

/* exp(x) for float, ~1 ulp on [-87, 88]; 0 below about -87.7, finite (≈1.6e38) above 88. */
static inline float exp_f(float x) {
  x = x < -88.0f ? -88.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float magic = 12582912.0f; /* 1.5 · 2^23: adding and subtracting rounds to an integer */
  float fn = (x * 1.44269504088896341f + magic) - magic;
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)fn + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* ---- the kernels (plain C on raw pointers) ---- */

HOT static void rms_forward(const float *x, const float *g, float *y, float *rstd, int rows, int d, double eps) {
  for (int t = 0; t < rows; t++) {
    const float *xr = x + (int64_t)t * d;
    float *yr = y + (int64_t)t * d;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < d; j++) ss += (double)xr[j] * xr[j];
    float r = (float)(1.0 / sqrt(ss / d + eps));
    rstd[t] = r;
    for (int j = 0; j < d; j++) yr[j] = xr[j] * r * g[j];
  }
}

HOT static void rms_backward(const float *dy, const float *x, const float *g, const float *rstd, float *dx,
                             float *dg, int rows, int d) {
  for (int t = 0; t < rows; t++) {
    const float *xr = x + (int64_t)t * d, *dyr = dy + (int64_t)t * d;
    float *dxr = dx + (int64_t)t * d;
    const float r = rstd[t];
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < d; j++) dot += (double)(g[j] * dyr[j] * xr[j]);
    for (int j = 0; j < d; j++) dg[j] += dyr[j] * xr[j] * r;
    const float c = (float)((double)r * r * r * dot / d);
    for (int j = 0; j < d; j++) dxr[j] += r * g[j] * dyr[j] - c * xr[j];
  }
}

HOT static void swiglu_forward(const float *gate, const float *up, float *sig, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float z = gate[i];
    const float s = 1.0f / (1.0f + exp_f(-z));
    sig[i] = s;
    out[i] = z * s * up[i];
  }
}

HOT static void swiglu_backward(const float *dOut, const float *gate, const float *sig, const float *up,
                                float *dGate, float *dUp, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float z = gate[i], s = sig[i], dv = dOut[i];
    dUp[i] = dv * z * s;
    dGate[i] = dv * up[i] * s * (1.0f + z * (1.0f - s));
  }
}

HOT static void rope_rows(float *x, int row0, int len, int nHeads, int headDim, const float *cos_t,
                          const float *sin_t, bool inverse) {
  const int d = nHeads * headDim, half = headDim / 2;
  const float sgn = inverse ? -1.0f : 1.0f;
  for (int p = 0; p < len; p++) {
    float *row = x + (int64_t)(row0 + p) * d;
    const float *c = cos_t + (int64_t)p * half, *s = sin_t + (int64_t)p * half;
    for (int h = 0; h < nHeads; h++) {
      float *hv = row + h * headDim;
      for (int i = 0; i < half; i++) {
        const float a = hv[2 * i], b = hv[2 * i + 1], cc = c[i], ss = sgn * s[i];
        hv[2 * i] = a * cc - b * ss;
        hv[2 * i + 1] = a * ss + b * cc;
      }
    }
  }
}

/* Causal softmax of every row of the n×n scores S in place (upper triangle zeroed); row i's
 * log-sum-exp goes to lse[i * lseStride]. */
HOT static void causal_softmax(float *S, int n, float *lse, int lseStride) {
  for (int i = 0; i < n; i++) {
    float *r = S + (int64_t)i * n;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j <= i; j++) mx = r[j] > mx ? r[j] : mx;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= i; j++) {
      const float e = exp_f(r[j] - mx);
      r[j] = e;
      sum += e;
    }
    lse[(int64_t)i * lseStride] = (float)(mx + log(sum));
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j <= i; j++) r[j] *= inv;
    for (int j = i + 1; j < n; j++) r[j] = 0;
  }
}

/* P (holding the raw scores) := exp(P − lse) on the causal part, 0 above it. */
HOT static void causal_exp(float *P, int n, const float *lse, int lseStride) {
  for (int i = 0; i < n; i++) {
    float *r = P + (int64_t)i * n;
    const float l = lse[(int64_t)i * lseStride];
    for (int j = 0; j <= i; j++) r[j] = exp_f(r[j] - l);
    for (int j = i + 1; j < n; j++) r[j] = 0;
  }
}

/* dP := P ⊙ (dP − rowsum(P ⊙ dP)) on the causal part, 0 above it. */
HOT static void causal_softmax_backward(const float *P, float *dP, int n) {
  for (int i = 0; i < n; i++) {
    const float *p = P + (int64_t)i * n;
    float *q = dP + (int64_t)i * n;
    double delta = 0;
#pragma omp simd reduction(+ : delta)
    for (int j = 0; j <= i; j++) delta += (double)(p[j] * q[j]);
    const float df = (float)delta;
    for (int j = 0; j <= i; j++) q[j] = p[j] * (q[j] - df);
    for (int j = i + 1; j < n; j++) q[j] = 0;
  }
}

/* Log-sum-exp, entropy and log p(target) of a logits row (float64 sums). */
HOT static void head_row(const float *z, int V, int target, double *logp, double *entropy, double *lse) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
  double sum = 0, sz = 0;
#pragma omp simd reduction(+ : sum, sz)
  for (int j = 0; j < V; j++) {
    const float e = exp_f(z[j] - mx);
    sum += e;
    sz += (double)(e * (z[j] - mx));
  }
  const double l = mx + log(sum);
  *lse = l;
  *entropy = l - mx - sz / sum;
  *logp = z[target] - l;
}

/* z := dLoss/dz = −p·(gl + ge·(log p + H)) + gl·[j = target], p = exp(z − lse). */
HOT static void head_row_backward(float *z, int V, int target, double lse, double ent, double gl, double ge) {
  const float lf = (float)lse, ef = (float)ent, glf = (float)gl, gef = (float)ge;
  for (int j = 0; j < V; j++) {
    const float lp = z[j] - lf;
    z[j] = -exp_f(lp) * (glf + gef * (lp + ef));
  }
  z[target] += glf;
}

HOT static void adamw_update(float *p, const float *g, float *m, float *v, int64_t n, double b1, double b2,
                             double stepSize, double sqrtBc2, double eps, double gradScale, double decay) {
  const double c1 = 1 - b1, c2 = 1 - b2;
  for (int64_t i = 0; i < n; i++) {
    /* Decay first, rounded to float32 as adamw.ts stores it, then the step. */
    const float pd = decay != 1 ? (float)(p[i] * decay) : p[i];
    const double gi = (double)g[i] * gradScale;
    const double mi = b1 * m[i] + c1 * gi;
    const double vi = b2 * v[i] + c2 * gi * gi;
    m[i] = (float)mi;
    v[i] = (float)vi;
    p[i] = (float)(pd - (stepSize * mi) / (sqrt(vi) / sqrtBc2 + eps));
  }
}

/* One query row (nHeads × headDim at q) against positions [0, len) of a head-major cache:
 * head h's keys are the len × headDim matrix at K + h·headStride (values likewise). */
HOT static void causal_softmax_block(float *s, int rows, int len, int first) {
  for (int i = 0; i < rows; i++) {
    float *r = s + (int64_t)i * len;
    const int visible = first + i;
    float mx = -INFINITY;
    for (int j = 0; j < visible; j++) mx = r[j] > mx ? r[j] : mx;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < visible; j++) {
      const float e = exp_f(r[j] - mx);
      r[j] = e;
      sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < visible; j++) r[j] *= inv;
    for (int j = visible; j < len; j++) r[j] = 0;
  }
}

HOT static void attend_decode(const float *q, const float *K, const float *V, int64_t headStride, int len, int H,
                              int hd, float scale, float *out, float *s) {
  for (int h = 0; h < H; h++) {
    const float *qh = q + (int64_t)h * hd, *Kh = K + h * headStride, *Vh = V + h * headStride;
    float *oh = out + (int64_t)h * hd;
    float mx = -INFINITY;
    for (int j = 0; j < len; j++) {
      const float *kj = Kh + (int64_t)j * hd;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < hd; i++) dot += qh[i] * kj[i];
      s[j] = dot * scale;
      mx = s[j] > mx ? s[j] : mx;
    }
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < len; j++) {
      const float e = exp_f(s[j] - mx);
      s[j] = e;
      sum += e;
    }
    for (int i = 0; i < hd; i++) oh[i] = 0;
    for (int j = 0; j < len; j++) {
      const float p = s[j];
      const float *vj = Vh + (int64_t)j * hd;
      for (int i = 0; i < hd; i++) oh[i] += p * vj[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < hd; i++) oh[i] *= inv;
  }
}

HOT static double sum_squares(const float *a, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * a[i];
  return s;
}

/* ---- N-API glue ---- */

typedef struct {
  napi_env env;
  const char *fn;
  napi_value argv[16];
  size_t argc;
  bool ok;
} Args;

static void fail(Args *a, int i, const char *why) {
  if (!a->ok) return;
  a->ok = false;
  char msg[160];
  snprintf(msg, sizeof msg, "mage_ops.%s: argument %d %s", a->fn, i, why);
  bool pending = false;
  napi_is_exception_pending(a->env, &pending);
  if (!pending) napi_throw_range_error(a->env, NULL, msg);
}

static bool args(napi_env env, napi_callback_info info, const char *fn, size_t want, Args *a) {
  a->env = env;
  a->fn = fn;
  a->ok = true;
  a->argc = 16;
  if (napi_get_cb_info(env, info, &a->argc, a->argv, NULL, NULL) != napi_ok || a->argc != want) {
    char msg[120];
    snprintf(msg, sizeof msg, "mage_ops.%s expects %zu arguments", fn, want);
    napi_throw_type_error(env, NULL, msg);
    return false;
  }
  return true;
}

static int32_t i32(Args *a, int i, int32_t min) {
  double v = 0;
  if (!a->ok) return 0;
  if (napi_get_value_double(a->env, a->argv[i], &v) != napi_ok || v != floor(v) || v > INT32_MAX) {
    fail(a, i, "must be an integer below 2^31");
    return 0;
  }
  if (v < min) {
    fail(a, i, "is out of range");
    return 0;
  }
  return (int32_t)v;
}

static double f64(Args *a, int i) {
  double v = 0;
  if (a->ok && napi_get_value_double(a->env, a->argv[i], &v) != napi_ok) fail(a, i, "must be a number");
  return v;
}

static bool boolean(Args *a, int i) {
  bool v = false;
  if (a->ok && napi_get_value_bool(a->env, a->argv[i], &v) != napi_ok) fail(a, i, "must be a boolean");
  return v;
}

/* A typed array of `type` holding at least `need` elements (need < 0 means "a bad size"). */
static void *arr(Args *a, int i, napi_typedarray_type type, int64_t need, size_t *lenOut) {
  if (!a->ok) return NULL;
  napi_typedarray_type t;
  size_t len = 0;
  void *data = NULL;
  if (napi_get_typedarray_info(a->env, a->argv[i], &t, &len, &data, NULL, NULL) != napi_ok || t != type) {
    fail(a, i, type == napi_float32_array   ? "must be a Float32Array"
               : type == napi_float64_array ? "must be a Float64Array"
                                            : "must be an Int32Array");
    return NULL;
  }
  if (need < 0 || (int64_t)len < need) {
    fail(a, i, "is too short for the sizes given");
    return NULL;
  }
  if (lenOut) *lenOut = len;
  return data;
}
#define F32(i, need) ((float *)arr(&a, i, napi_float32_array, (need), NULL))
#define F64A(i, need) ((double *)arr(&a, i, napi_float64_array, (need), NULL))
#define I32A(i, need) ((int32_t *)arr(&a, i, napi_int32_array, (need), NULL))

static napi_value rms_norm_forward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "rmsNormForward", 7, &a)) return NULL;
  int rows = i32(&a, 4, 0), d = i32(&a, 5, 1);
  double eps = f64(&a, 6);
  int64_t n = (int64_t)rows * d;
  float *x = F32(0, n), *g = F32(1, d), *y = F32(2, n), *rstd = F32(3, rows);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  rms_forward(x, g, y, rstd, rows, d, eps);
  fp_restore(fp);
  return NULL;
}

static napi_value rms_norm_backward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "rmsNormBackward", 8, &a)) return NULL;
  int rows = i32(&a, 6, 0), d = i32(&a, 7, 1);
  int64_t n = (int64_t)rows * d;
  float *dy = F32(0, n), *x = F32(1, n), *g = F32(2, d), *rstd = F32(3, rows), *dx = F32(4, n), *dg = F32(5, d);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  rms_backward(dy, x, g, rstd, dx, dg, rows, d);
  fp_restore(fp);
  return NULL;
}

static napi_value swiglu_forward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "swigluForward", 5, &a)) return NULL;
  int64_t n = i32(&a, 4, 0);
  float *gate = F32(0, n), *up = F32(1, n), *sig = F32(2, n), *out = F32(3, n);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  swiglu_forward(gate, up, sig, out, n);
  fp_restore(fp);
  return NULL;
}

static napi_value swiglu_backward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "swigluBackward", 7, &a)) return NULL;
  int64_t n = i32(&a, 6, 0);
  float *dOut = F32(0, n), *gate = F32(1, n), *sig = F32(2, n), *up = F32(3, n), *dGate = F32(4, n),
        *dUp = F32(5, n);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  swiglu_backward(dOut, gate, sig, up, dGate, dUp, n);
  fp_restore(fp);
  return NULL;
}

/* Checks the ragged layout (offsets/lengths of `count` sequences) against `rows` rows; returns the
 * longest length, or -1 after throwing. */
static int check_layout(Args *a, int iOff, const int32_t *off, const int32_t *len, int64_t count, int64_t rows) {
  int maxLen = 0;
  for (int64_t s = 0; s < count && a->ok; s++) {
    if (off[s] < 0 || len[s] < 0 || (int64_t)off[s] + len[s] > rows) fail(a, iOff, "has a sequence outside the rows");
    if (len[s] > maxLen) maxLen = len[s];
  }
  return a->ok ? maxLen : -1;
}

static size_t arr_len(Args *a, int i, napi_typedarray_type type) {
  size_t len = 0;
  arr(a, i, type, 0, &len);
  return len;
}

static napi_value rope_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "rope", 8, &a)) return NULL;
  int H = i32(&a, 3, 1), hd = i32(&a, 4, 2);
  bool inverse = boolean(&a, 7);
  if (a.ok && hd % 2 != 0) fail(&a, 4, "must be even");
  int64_t count = (int64_t)arr_len(&a, 1, napi_int32_array);
  size_t xLen = arr_len(&a, 0, napi_float32_array);
  int64_t d = (int64_t)H * hd;
  float *x = F32(0, 0);
  int32_t *off = I32A(1, count), *len = I32A(2, count);
  if (!a.ok) return NULL;
  int maxLen = check_layout(&a, 1, off, len, count, (int64_t)xLen / d);
  float *cs = F32(5, (int64_t)maxLen * (hd / 2)), *sn = F32(6, (int64_t)maxLen * (hd / 2));
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  for (int64_t s = 0; s < count; s++) rope_rows(x, off[s], len[s], H, hd, cs, sn, inverse);
  fp_restore(fp);
  return NULL;
}

static napi_value attention_forward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "attentionForward", 11, &a)) return NULL;
  int H = i32(&a, 8, 1), hd = i32(&a, 9, 1);
  float scale = (float)f64(&a, 10);
  int64_t count = (int64_t)arr_len(&a, 6, napi_int32_array);
  int32_t *off = I32A(6, 0), *len = I32A(7, count);
  int64_t d = (int64_t)H * hd;
  int64_t T = (int64_t)arr_len(&a, 0, napi_float32_array) / d;
  if (!a.ok) return NULL;
  int maxLen = check_layout(&a, 6, off, len, count, T);
  float *q = F32(0, T * d), *k = F32(1, T * d), *v = F32(2, T * d), *attn = F32(3, T * d), *lse = F32(4, T * H),
        *S = F32(5, (int64_t)maxLen * maxLen);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  for (int64_t s = 0; s < count; s++) {
    const int n = len[s];
    if (n == 0) continue;
    for (int h = 0; h < H; h++) {
      const int64_t o = (int64_t)off[s] * d + (int64_t)h * hd;
      cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, n, n, hd, scale, q + o, d, k + o, d, 0.0f, S, n);
      causal_softmax(S, n, lse + (int64_t)off[s] * H + h, H);
      cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, hd, n, 1.0f, S, n, v + o, d, 0.0f, attn + o, d);
    }
  }
  fp_restore(fp);
  return NULL;
}

static napi_value attention_backward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "attentionBackward", 15, &a)) return NULL;
  int H = i32(&a, 12, 1), hd = i32(&a, 13, 1);
  float scale = (float)f64(&a, 14);
  int64_t count = (int64_t)arr_len(&a, 10, napi_int32_array);
  int32_t *off = I32A(10, 0), *len = I32A(11, count);
  int64_t d = (int64_t)H * hd;
  int64_t T = (int64_t)arr_len(&a, 0, napi_float32_array) / d;
  if (!a.ok) return NULL;
  int maxLen = check_layout(&a, 10, off, len, count, T);
  int64_t nn = (int64_t)maxLen * maxLen;
  float *q = F32(0, T * d), *k = F32(1, T * d), *v = F32(2, T * d), *lse = F32(3, T * H), *dAttn = F32(4, T * d),
        *dq = F32(5, T * d), *dk = F32(6, T * d), *dv = F32(7, T * d), *P = F32(8, nn), *dP = F32(9, nn);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  for (int64_t s = 0; s < count; s++) {
    const int n = len[s];
    if (n == 0) continue;
    for (int h = 0; h < H; h++) {
      const int64_t o = (int64_t)off[s] * d + (int64_t)h * hd;
      cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, n, n, hd, scale, q + o, d, k + o, d, 0.0f, P, n);
      causal_exp(P, n, lse + (int64_t)off[s] * H + h, H);
      cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, n, n, hd, 1.0f, dAttn + o, d, v + o, d, 0.0f, dP, n);
      cblas_sgemm(ROW_MAJOR, TRANS, NO_TRANS, n, hd, n, 1.0f, P, n, dAttn + o, d, 0.0f, dv + o, d);
      causal_softmax_backward(P, dP, n);
      cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, hd, n, scale, dP, n, k + o, d, 0.0f, dq + o, d);
      cblas_sgemm(ROW_MAJOR, TRANS, NO_TRANS, n, hd, n, scale, dP, n, q + o, d, 0.0f, dk + o, d);
    }
  }
  fp_restore(fp);
  return NULL;
}

static bool targets_ok(Args *a, int i, const int32_t *t, int rows, int V) {
  for (int r = 0; r < rows && a->ok; r++)
    if (t[r] < 0 || t[r] >= V) fail(a, i, "has a target outside [0, V)");
  return a->ok;
}

static napi_value head_forward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "headForward", 10, &a)) return NULL;
  int zOff = i32(&a, 1, 0), rows = i32(&a, 2, 0), V = i32(&a, 3, 1), tOff = i32(&a, 5, 0), sOff = i32(&a, 9, 0);
  float *z = F32(0, (int64_t)zOff + (int64_t)rows * V);
  int32_t *t = I32A(4, (int64_t)tOff + rows);
  double *logp = F64A(6, (int64_t)sOff + rows), *ent = F64A(7, (int64_t)sOff + rows),
         *lse = F64A(8, (int64_t)sOff + rows);
  if (!a.ok || !targets_ok(&a, 4, t + tOff, rows, V)) return NULL;
  FpMode fp = fp_fast();
  for (int r = 0; r < rows; r++)
    head_row(z + zOff + (int64_t)r * V, V, t[tOff + r], logp + sOff + r, ent + sOff + r, lse + sOff + r);
  fp_restore(fp);
  return NULL;
}

static napi_value head_backward_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "headBackward", 11, &a)) return NULL;
  int zOff = i32(&a, 1, 0), rows = i32(&a, 2, 0), V = i32(&a, 3, 1), tOff = i32(&a, 5, 0), sOff = i32(&a, 10, 0);
  float *z = F32(0, (int64_t)zOff + (int64_t)rows * V);
  int32_t *t = I32A(4, (int64_t)tOff + rows);
  int64_t need = (int64_t)sOff + rows;
  double *lse = F64A(6, need), *ent = F64A(7, need), *gl = F64A(8, need), *ge = F64A(9, need);
  if (!a.ok || !targets_ok(&a, 4, t + tOff, rows, V)) return NULL;
  FpMode fp = fp_fast();
  for (int r = 0; r < rows; r++)
    head_row_backward(z + zOff + (int64_t)r * V, V, t[tOff + r], lse[sOff + r], ent[sOff + r], gl[sOff + r],
                      ge[sOff + r]);
  fp_restore(fp);
  return NULL;
}

static napi_value adamw_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "adamw", 13, &a)) return NULL;
  int64_t off = i32(&a, 4, 0), n = i32(&a, 5, 0);
  double b1 = f64(&a, 6), b2 = f64(&a, 7), stepSize = f64(&a, 8), sqrtBc2 = f64(&a, 9), eps = f64(&a, 10),
         gs = f64(&a, 11), decay = f64(&a, 12);
  float *p = F32(0, off + n), *g = F32(1, off + n), *m = F32(2, off + n), *v = F32(3, off + n);
  if (!a.ok) return NULL;
  /* No flush-to-zero here: the update stays bit-identical to AdamW.update in adamw.ts. */
  adamw_update(p + off, g + off, m + off, v + off, n, b1, b2, stepSize, sqrtBc2, eps, gs, decay);
  return NULL;
}

static napi_value sum_squares_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "sumSquares", 1, &a)) return NULL;
  size_t n = 0;
  float *x = (float *)arr(&a, 0, napi_float32_array, 0, &n);
  if (!a.ok) return NULL;
  napi_value out;
  if (napi_create_double(env, sum_squares(x, (int64_t)n), &out) != napi_ok) return NULL;
  return out;
}

static napi_value attend_decode_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "attendDecode", 13, &a)) return NULL;
  int64_t qOff = i32(&a, 1, 0), kvOff = i32(&a, 4, 0), headStride = i32(&a, 5, 0), outOff = i32(&a, 11, 0);
  int len = i32(&a, 6, 1), H = i32(&a, 7, 1), hd = i32(&a, 8, 1);
  float scale = (float)f64(&a, 9);
  int64_t row = (int64_t)H * hd, kvNeed = kvOff + (int64_t)(H - 1) * headStride + (int64_t)len * hd;
  float *q = F32(0, qOff + row), *K = F32(2, kvNeed), *V = F32(3, kvNeed), *out = F32(10, outOff + row),
        *scratch = F32(12, len);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  attend_decode(q + qOff, K + kvOff, V + kvOff, headStride, len, H, hd, scale, out + outOff, scratch);
  fp_restore(fp);
  return NULL;
}

static napi_value causal_softmax_js(napi_env env, napi_callback_info info) {
  Args a;
  if (!args(env, info, "causalSoftmax", 4, &a)) return NULL;
  int rows = i32(&a, 1, 0), len = i32(&a, 2, 1), first = i32(&a, 3, 1);
  if (a.ok && first + rows - 1 > len) fail(&a, 3, "first + rows - 1 exceeds len");
  float *s = F32(0, (int64_t)rows * len);
  if (!a.ok) return NULL;
  FpMode fp = fp_fast();
  causal_softmax_block(s, rows, len, first);
  fp_restore(fp);
  return NULL;
}

napi_status mage_ops_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"rmsNormForward", NULL, rms_norm_forward_js, NULL, NULL, NULL, napi_default, NULL},
      {"rmsNormBackward", NULL, rms_norm_backward_js, NULL, NULL, NULL, napi_default, NULL},
      {"swigluForward", NULL, swiglu_forward_js, NULL, NULL, NULL, napi_default, NULL},
      {"swigluBackward", NULL, swiglu_backward_js, NULL, NULL, NULL, napi_default, NULL},
      {"rope", NULL, rope_js, NULL, NULL, NULL, napi_default, NULL},
      {"attentionForward", NULL, attention_forward_js, NULL, NULL, NULL, napi_default, NULL},
      {"attentionBackward", NULL, attention_backward_js, NULL, NULL, NULL, napi_default, NULL},
      {"headForward", NULL, head_forward_js, NULL, NULL, NULL, napi_default, NULL},
      {"headBackward", NULL, head_backward_js, NULL, NULL, NULL, napi_default, NULL},
      {"adamw", NULL, adamw_js, NULL, NULL, NULL, napi_default, NULL},
      {"sumSquares", NULL, sum_squares_js, NULL, NULL, NULL, napi_default, NULL},
      {"attendDecode", NULL, attend_decode_js, NULL, NULL, NULL, napi_default, NULL},
      {"causalSoftmax", NULL, causal_softmax_js, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
