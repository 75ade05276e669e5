/*
 * mage_blas: the smallest useful bridge from Node to OpenBLAS.
 *
 *   sgemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc)
 *     row-major cblas_sgemm on Float32Arrays, zero-copy (offsets are in elements); a product with
 *     one row or one column goes to cblas_sgemv instead.
 *   setThreads(n) / getThreads()  OpenBLAS worker threads.
 *
 * Arguments are checked in TypeScript (src/model/kernels/native.ts); here we only re-check
 * that the addressed spans lie inside each array, so a bad call throws instead of corrupting memory.
 * The BLAS prototypes are declared here rather than taken from <cblas.h>, so the build does not
 * depend on which cblas.h the system's alternatives point at.
 */
#include <node_api.h>
#include <stdint.h>

extern void cblas_sgemm(int order, int transA, int transB, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
extern void cblas_sgemv(int order, int trans, int m, int n, float alpha, const float *a, int lda, const float *x,
                        int incX, float beta, float *y, int incY);
extern void openblas_set_num_threads(int n);
extern int openblas_get_num_threads(void);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

#define CHECK(call)                                                    \
  do {                                                                 \
    if ((call) != napi_ok) {                                           \
      napi_throw_error(env, NULL, "mage_blas: N-API call failed: " #call); \
      return NULL;                                                     \
    }                                                                  \
  } while (0)

static float *f32(napi_env env, napi_value v, size_t *len) {
  napi_typedarray_type type;
  void *data = NULL;
  if (napi_get_typedarray_info(env, v, &type, len, &data, NULL, NULL) != napi_ok || type != napi_float32_array)
    return NULL;
  return (float *)data;
}

/* Elements spanned by a rows×cols row-major view with leading dimension ld (0 when empty). */
static int64_t span(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

/*
 * A one-row (m = 1) or one-column (n = 1) product as cblas_sgemv: OpenBLAS's sgemm has no such
 * shortcut and runs these (the sampler's decode steps, the bias-like gradients) several times slower
 * than its gemv kernels. The vector operand is op(A)'s only row or op(B)'s only column, read with the
 * stride its storage gives; the matrix operand is the other one, transposed as gemv needs.
 * beta = 0 must ignore whatever C holds (NaN included), so C is zeroed here rather than trusting
 * gemv's scaling of y by 0 (which some OpenBLAS versions compute as a multiplication).
 */
static void gemv_path(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                      int ldb, float beta, float *c, int ldc) {
  int len = m == 1 ? n : m, incY = m == 1 ? 1 : ldc;
  if (beta == 0.0f)
    for (int i = 0; i < len; i++) c[(int64_t)i * incY] = 0.0f;
  if (m == 1) {
    /* y[j] = Σ_p op(A)[0, p]·op(B)[p, j]: x is A's row (or, transposed, its first column). */
    int incX = ta ? lda : 1;
    if (tb) cblas_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, incX, beta, c, incY);
    else cblas_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, incX, beta, c, incY);
  } else {
    /* y[i] = Σ_p op(A)[i, p]·op(B)[p, 0]: x is B's column (or, transposed, its first row). */
    int incX = tb ? 1 : ldb;
    if (ta) cblas_sgemv(ROW_MAJOR, TRANS, k, m, alpha, a, lda, b, incX, beta, c, incY);
    else cblas_sgemv(ROW_MAJOR, NO_TRANS, m, k, alpha, a, lda, b, incX, beta, c, incY);
  }
}

static napi_value sgemm(napi_env env, napi_callback_info info) {
  size_t argc = 16;
  napi_value argv[16];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc != 16) {
    napi_throw_type_error(env, NULL, "mage_blas.sgemm expects 16 arguments");
    return NULL;
  }
  bool ta, tb;
  int32_t m, n, k, aOff, lda, bOff, ldb, cOff, ldc;
  double alpha, beta;
  CHECK(napi_get_value_bool(env, argv[0], &ta));
  CHECK(napi_get_value_bool(env, argv[1], &tb));
  CHECK(napi_get_value_int32(env, argv[2], &m));
  CHECK(napi_get_value_int32(env, argv[3], &n));
  CHECK(napi_get_value_int32(env, argv[4], &k));
  CHECK(napi_get_value_double(env, argv[5], &alpha));
  CHECK(napi_get_value_int32(env, argv[7], &aOff));
  CHECK(napi_get_value_int32(env, argv[8], &lda));
  CHECK(napi_get_value_int32(env, argv[10], &bOff));
  CHECK(napi_get_value_int32(env, argv[11], &ldb));
  CHECK(napi_get_value_double(env, argv[12], &beta));
  CHECK(napi_get_value_int32(env, argv[14], &cOff));
  CHECK(napi_get_value_int32(env, argv[15], &ldc));
  size_t aLen, bLen, cLen;
  float *a = f32(env, argv[6], &aLen), *b = f32(env, argv[9], &bLen), *c = f32(env, argv[13], &cLen);
  if (!a || !b || !c) {
    napi_throw_type_error(env, NULL, "mage_blas.sgemm: a, b and c must be Float32Arrays");
    return NULL;
  }
  int64_t aRows = ta ? k : m, aCols = ta ? m : k, bRows = tb ? n : k, bCols = tb ? k : n;
  if (m < 0 || n < 0 || k < 0 || aOff < 0 || bOff < 0 || cOff < 0 || lda < (aCols > 1 ? aCols : 1) ||
      ldb < (bCols > 1 ? bCols : 1) || ldc < (n > 1 ? n : 1) || aOff + span(aRows, aCols, lda) > (int64_t)aLen ||
      bOff + span(bRows, bCols, ldb) > (int64_t)bLen || cOff + span(m, n, ldc) > (int64_t)cLen) {
    napi_throw_range_error(env, NULL, "mage_blas.sgemm: dimensions, offsets or leading dimensions out of range");
    return NULL;
  }
  if (m == 0 || n == 0) return NULL;
  if (m == 1 || n == 1) {
    gemv_path(ta, tb, m, n, k, (float)alpha, a + aOff, lda, b + bOff, ldb, (float)beta, c + cOff, ldc);
    return NULL;
  }
  cblas_sgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, m, n, k, (float)alpha, a + aOff, lda,
              b + bOff, ldb, (float)beta, c + cOff, ldc);
  return NULL;
}

static napi_value set_threads(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t t;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc != 1 || napi_get_value_int32(env, argv[0], &t) != napi_ok || t < 1) {
    napi_throw_range_error(env, NULL, "mage_blas.setThreads expects a positive integer");
    return NULL;
  }
  openblas_set_num_threads(t);
  return NULL;
}

static napi_value get_threads(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  CHECK(napi_create_int32(env, openblas_get_num_threads(), &out));
  return out;
}

/* The row-wise training ops in mage_ops.c. */
napi_status mage_ops_register(napi_env env, napi_value exports);

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"sgemm", NULL, sgemm, NULL, NULL, NULL, napi_default, NULL},
      {"setThreads", NULL, set_threads, NULL, NULL, NULL, napi_default, NULL},
      {"getThreads", NULL, get_threads, NULL, NULL, NULL, napi_default, NULL},
  };
  CHECK(napi_define_properties(env, exports, sizeof props / sizeof props[0], props));
  CHECK(mage_ops_register(env, exports));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
