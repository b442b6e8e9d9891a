/*
 * mock_backend.c — the mock dynamic backend of the loader tests, in plain C99
 * against backend_abi.h alone.
 *
 * One source, many shared objects: backends/testing/CMakeLists.txt builds it
 * once per scenario with compile definitions choosing the misbehaviour.
 *
 *   MOCK_ID="MockA"         what GetBackendId returns (MOCK_ID_NULL: NULL)
 *   MOCK_DESC="..."         info.description, so a test can tell files apart
 *   MOCK_MAJOR / MOCK_MINOR what GetVersion reports (default: this header's)
 *   MOCK_NO_GET_ID, MOCK_NO_GET_VERSION, MOCK_NO_FACTORY   leave one entry point out
 *   MOCK_SCORE=n            export GetBackendScore returning n
 *   MOCK_FACTORY_NULL       BackendFactory returns NULL
 *   MOCK_CREATE_REFUSES     create returns a BP_STATUS_UNSUPPORTED status
 *   MOCK_REFUSE_WITH_INSTANCE  ... and hands out an instance all the same
 *   MOCK_NULL_QUERY_SLOT    the required query_support slot is NULL
 *   MOCK_SMALL_TABLE        struct_size smaller than API 1.0's table
 *   MOCK_CRASH_IN_CREATE    create raises SIGSEGV
 *   MOCK_ABORT_IN_QUERY     query_support calls abort()
 *   MOCK_CRASH_IN_EXECUTE   execute raises SIGSEGV (loads and compiles fine)
 *   MOCK_HANG_IN_CREATE     create never returns
 *   MOCK_FROZEN_ABI_HEADER  build against "backend_abi.h" found on the include
 *                           path (the frozen copy in tests/abi/v1_0)
 *   MOCK_THREAD_POOL        (API >= 1.5) also fill execute_shaped, which runs
 *                           Relu through host->parallel_for on the pool it is
 *                           lent, counting in MockPoolCounters()
 *   MOCK_HOOKS_HEADER="h"   include h, which may define MOCK_ON_CREATE(),
 *                           MOCK_ON_CONFIGURE(), MOCK_ON_COMPILE(),
 *                           MOCK_ON_EXECUTE(), MOCK_ON_EXECUTE_END() and
 *                           MOCK_ON_DESTROY(): code run in those slots (the hygiene tests' violations,
 *                           tests/hygiene/violations.h)
 *
 * When nothing misbehaves it is a working backend that runs Relu (float32),
 * both compiled (compile/execute) and one op at a time (execute_node), and
 * counts every call in a struct exported as MockCounters() so tests can check
 * that each slot was reached and that each runtime created its own instance.
 */
#if defined(MOCK_FROZEN_ABI_HEADER)
/* tests/abi/v1_0/backend_abi.h, the released 1.0 header, is the only ABI
 * header on the include path of this build (tests/abi/CMakeLists.txt). */
#include "backend_abi.h"
#else
#include <backplane/backend_abi.h>
#endif

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(MOCK_HOOKS_HEADER)
#include MOCK_HOOKS_HEADER
#endif
#ifndef MOCK_ON_CREATE
#define MOCK_ON_CREATE()
#endif
#ifndef MOCK_ON_CONFIGURE
#define MOCK_ON_CONFIGURE()
#endif
#ifndef MOCK_ON_COMPILE
#define MOCK_ON_COMPILE()
#endif
#ifndef MOCK_ON_EXECUTE
#define MOCK_ON_EXECUTE()
#endif
#ifndef MOCK_ON_EXECUTE_END
#define MOCK_ON_EXECUTE_END()
#endif
#ifndef MOCK_ON_DESTROY
#define MOCK_ON_DESTROY()
#endif

#ifndef MOCK_ID
#define MOCK_ID "MockA"
#endif
#ifndef MOCK_DESC
#define MOCK_DESC "mock backend"
#endif
#ifndef MOCK_MAJOR
#define MOCK_MAJOR BP_API_VERSION_MAJOR
#endif
#ifndef MOCK_MINOR
#define MOCK_MINOR BP_API_VERSION_MINOR
#endif

/* Call counters; names match the table slots. Exported for the tests. */
typedef struct mock_counters {
  int create, destroy, get_info, configure, query_support, compile, compiled_destroy,
      context_create, context_destroy, execute, execute_node, before_load_network,
      after_load_network, before_unload_network, after_unload_network, live_instances;
} mock_counters_t;

static mock_counters_t g_counters;

static const bp_backend_api_t* table(void);

BP_EXPORT mock_counters_t* MockCounters(void) {
  (void)table; /* referenced even in the variants without a BackendFactory */
  return &g_counters;
}

struct bp_backend {
  const bp_host_api_t* host;
  int serial; /* which create() made it */
};
struct bp_compiled {
  bp_backend_t* owner;
};
struct bp_exec_context {
  bp_backend_t* owner;
};

static bp_status_t* fail(const bp_host_api_t* host, bp_status_code_t code, const char* message) {
  return host->status_create(code, message);
}

static bp_status_t* mock_create(const bp_host_api_t* host, uint32_t runtime_major,
                                uint32_t runtime_minor, bp_backend_t** out) {
  (void)runtime_minor;
  g_counters.create++;
#if defined(MOCK_CRASH_IN_CREATE)
  raise(SIGSEGV);
#elif defined(MOCK_HANG_IN_CREATE)
  for (;;) pause();
#endif
#if defined(MOCK_CREATE_REFUSES)
  *out = NULL;
#if defined(MOCK_REFUSE_WITH_INSTANCE)
  *out = (bp_backend_t*)malloc(sizeof **out);
  if (*out != NULL) g_counters.live_instances++;
#endif
  return fail(host, BP_STATUS_UNSUPPORTED, "mock refuses: no device here");
#else
  if (runtime_major != BP_API_VERSION_MAJOR)
    return fail(host, BP_STATUS_VERSION_MISMATCH, "runtime major differs");
  bp_backend_t* b = (bp_backend_t*)malloc(sizeof *b);
  if (b == NULL) return fail(host, BP_STATUS_OUT_OF_MEMORY, "out of memory");
  MOCK_ON_CREATE();
  b->host = host;
  b->serial = g_counters.create;
  g_counters.live_instances++;
  *out = b;
  return NULL;
#endif
}

static void mock_destroy(bp_backend_t* backend) {
  if (backend == NULL) return;
  MOCK_ON_DESTROY();
  g_counters.destroy++;
  g_counters.live_instances--;
  free(backend);
}

static bp_status_t* mock_get_info(bp_backend_t* backend, bp_backend_info_t* out) {
  (void)backend;
  g_counters.get_info++;
  out->struct_size = BP_STRUCT_SIZE(bp_backend_info_t, flags);
  out->vendor = "Mock";
  out->description = MOCK_DESC;
  out->device_count = 0;
  out->flags = BP_BACKEND_FLAG_COMPILE | BP_BACKEND_FLAG_SINGLE_OP;
  return NULL;
}

static bp_status_t* mock_configure(bp_backend_t* backend, size_t count, const char* const* keys,
                                   const char* const* values) {
  size_t i;
  (void)values;
  MOCK_ON_CONFIGURE();
  g_counters.configure++;
  for (i = 0; i < count; ++i)
    if (strcmp(keys[i], "num_threads") != 0)
      return fail(backend->host, BP_STATUS_INVALID_ARGUMENT, "unknown configuration key");
  return NULL;
}

static int is_relu(const bp_graph_view_t* view, size_t n) {
  const bp_node_t* node = &view->nodes[n];
  return strcmp(node->op_type, "Relu") == 0 && node->domain[0] == '\0' && node->num_inputs == 1 &&
         node->num_outputs == 1 && view->values[node->inputs[0]].dtype == BP_DTYPE_FLOAT32;
}

static bp_status_t* mock_query_support(bp_backend_t* backend, const bp_graph_view_t* view,
                                       bp_node_report_t* report) {
  size_t n;
  g_counters.query_support++;
#if defined(MOCK_ABORT_IN_QUERY)
  abort();
#endif
  for (n = 0; n < view->num_nodes; ++n)
    backend->host->report_node(report, n, is_relu(view, n) ? BP_NODE_SUPPORTED : BP_NODE_REJECTED,
                               is_relu(view, n) ? NULL : "mock runs float32 Relu only");
  return NULL;
}

/* A compiled partition is a chain of Relus with one input and one output:
 * relu(relu(x)) == relu(x), so execute applies it once. */
static bp_status_t* mock_compile(bp_backend_t* backend, const bp_graph_view_t* view,
                                 const bp_compile_options_t* options, bp_node_report_t* report,
                                 bp_compiled_t** out) {
  size_t n;
  bp_compiled_t* c;
  (void)options;
  (void)report;
  MOCK_ON_COMPILE();
  g_counters.compile++;
  *out = NULL;
  if (view->num_inputs != 1 || view->num_outputs != 1)
    return fail(backend->host, BP_STATUS_UNSUPPORTED,
                "mock compiles one-input one-output Relu chains");
  for (n = 0; n < view->num_nodes; ++n)
    if (!is_relu(view, n))
      return fail(backend->host, BP_STATUS_UNSUPPORTED, "mock runs float32 Relu only");
  c = (bp_compiled_t*)malloc(sizeof *c);
  if (c == NULL) return fail(backend->host, BP_STATUS_OUT_OF_MEMORY, "out of memory");
  c->owner = backend;
  *out = c;
  return NULL;
}

static void mock_compiled_destroy(bp_compiled_t* compiled) {
  if (compiled == NULL) return;
  g_counters.compiled_destroy++;
  free(compiled);
}

static bp_status_t* mock_context_create(bp_compiled_t* compiled, bp_exec_context_t** out) {
  bp_exec_context_t* ctx = (bp_exec_context_t*)malloc(sizeof *ctx);
  g_counters.context_create++;
  if (ctx == NULL) return fail(compiled->owner->host, BP_STATUS_OUT_OF_MEMORY, "out of memory");
  ctx->owner = compiled->owner;
  *out = ctx;
  return NULL;
}

static void mock_context_destroy(bp_exec_context_t* context) {
  if (context == NULL) return;
  g_counters.context_destroy++;
  free(context);
}

static void relu(const bp_tensor_t* in, const bp_tensor_t* out) {
  size_t i, count = in->size_bytes / sizeof(float);
  const float* x = (const float*)in->data;
  float* y = (float*)out->data;
  for (i = 0; i < count; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static bp_status_t* mock_execute(bp_exec_context_t* context, size_t num_inputs,
                                 const bp_tensor_t* inputs, size_t num_outputs,
                                 const bp_tensor_t* outputs) {
  g_counters.execute++;
  MOCK_ON_EXECUTE();
#if defined(MOCK_CRASH_IN_EXECUTE)
  raise(SIGSEGV);
#endif
  if (num_inputs != 1 || num_outputs != 1 || inputs[0].size_bytes != outputs[0].size_bytes)
    return fail(context->owner->host, BP_STATUS_INVALID_ARGUMENT, "mock execute: bad tensors");
  relu(&inputs[0], &outputs[0]);
  MOCK_ON_EXECUTE_END();
  return NULL;
}

static bp_status_t* mock_execute_node(bp_backend_t* backend, const bp_graph_view_t* view,
                                      size_t node_index, size_t num_inputs,
                                      const bp_tensor_t* inputs, size_t num_outputs,
                                      const bp_tensor_t* outputs) {
  g_counters.execute_node++;
  if (node_index >= view->num_nodes || !is_relu(view, node_index) || num_inputs != 1 ||
      num_outputs != 1)
    return fail(backend->host, BP_STATUS_UNSUPPORTED, "mock runs float32 Relu only");
  relu(&inputs[0], &outputs[0]);
  return NULL;
}

#if defined(MOCK_THREAD_POOL) && BP_API_VERSION_MINOR >= 5
/* What execute_shaped saw; exported for the tests. Written from pool
 * threads, hence the atomics (GCC/Clang builtins: this file is C99). */
typedef struct mock_pool_counters {
  int execute_shaped, chunks, max_pool_size, edge_flags, with_pool;
} mock_pool_counters_t;
static mock_pool_counters_t g_pool;
BP_EXPORT mock_pool_counters_t* MockPoolCounters(void) { return &g_pool; }

typedef struct relu_job {
  const float* x;
  float* y;
} relu_job_t;

static void relu_chunk(void* ctx, size_t begin, size_t end) {
  const relu_job_t* job = (const relu_job_t*)ctx;
  size_t i;
  for (i = begin; i < end; ++i) job->y[i] = job->x[i] > 0.0f ? job->x[i] : 0.0f;
  __atomic_fetch_add(&g_pool.chunks, 1, __ATOMIC_RELAXED);
}

static bp_status_t* mock_execute_shaped(bp_exec_context_t* context, const bp_execute_args_t* args) {
  const bp_host_api_t* host = context->owner->host;
  bp_thread_pool_t* pool = NULL;
  relu_job_t job;
  int size;
  __atomic_fetch_add(&g_pool.execute_shaped, 1, __ATOMIC_RELAXED);
  if (args->num_inputs != 1 || args->num_outputs != 1 ||
      args->inputs[0].size_bytes != args->outputs[0].size_bytes)
    return fail(host, BP_STATUS_INVALID_ARGUMENT, "mock execute_shaped: bad tensors");
  if (BP_HAS_FIELD(bp_execute_args_t, flags, args->struct_size)) {
    pool = args->thread_pool;
    if (args->flags & BP_EXECUTE_EDGE_FOLLOWS)
      __atomic_fetch_add(&g_pool.edge_flags, 1, __ATOMIC_RELAXED);
  }
  if (!BP_HAS_FIELD(bp_host_api_t, parallel_for, host->struct_size)) {
    relu(&args->inputs[0], &args->outputs[0]);
    return NULL;
  }
  if (pool != NULL) __atomic_fetch_add(&g_pool.with_pool, 1, __ATOMIC_RELAXED);
  size = (int)host->thread_pool_size(pool);
  if (size > g_pool.max_pool_size) g_pool.max_pool_size = size;
  job.x = (const float*)args->inputs[0].data;
  job.y = (float*)args->outputs[0].data;
  /* grain 1: even a tiny tensor is split, so the tests see the chunks */
  return host->parallel_for(pool, args->inputs[0].size_bytes / sizeof(float), 1, relu_chunk, &job);
}
#endif

#define MOCK_HOOK(name)                                                 \
  static bp_status_t* mock_##name(bp_backend_t* backend, uint64_t id) { \
    (void)backend;                                                      \
    (void)id;                                                           \
    g_counters.name++;                                                  \
    return NULL;                                                        \
  }
MOCK_HOOK(before_load_network)
MOCK_HOOK(after_load_network)
MOCK_HOOK(before_unload_network)
MOCK_HOOK(after_unload_network)

static bp_backend_api_t g_table;

static const bp_backend_api_t* table(void) {
  bp_backend_api_t* t = &g_table;
  memset(t, 0, sizeof *t);
  /* The whole table of the header this file is built against, with that
   * header's minor: the pair the host checks. */
  t->struct_size = sizeof *t;
#if defined(MOCK_SMALL_TABLE)
  t->struct_size = BP_STRUCT_SIZE(bp_backend_api_t, get_info);
#endif
  t->api_major = MOCK_MAJOR;
  t->api_minor = MOCK_MINOR;
  t->create = mock_create;
  t->destroy = mock_destroy;
  t->get_info = mock_get_info;
  t->configure = mock_configure;
#if defined(MOCK_NULL_QUERY_SLOT)
  t->query_support = NULL; /* a required slot left out */
  (void)mock_query_support;
#else
  t->query_support = mock_query_support;
#endif
  t->compile = mock_compile;
  t->compiled_destroy = mock_compiled_destroy;
  t->context_create = mock_context_create;
  t->context_destroy = mock_context_destroy;
  t->execute = mock_execute;
  t->execute_node = mock_execute_node;
#if defined(MOCK_THREAD_POOL) && BP_API_VERSION_MINOR >= 5
  t->execute_shaped = mock_execute_shaped;
#endif
  t->before_load_network = mock_before_load_network;
  t->after_load_network = mock_after_load_network;
  t->before_unload_network = mock_before_unload_network;
  t->after_unload_network = mock_after_unload_network;
  return t;
}

/* ---- entry points ------------------------------------------------------- */

#if !defined(MOCK_NO_GET_ID)
BP_EXPORT const char* GetBackendId(void) {
#if defined(MOCK_ID_NULL)
  return NULL;
#else
  return MOCK_ID;
#endif
}
#endif

#if !defined(MOCK_NO_GET_VERSION)
BP_EXPORT void GetVersion(uint32_t* outMajor, uint32_t* outMinor) {
  *outMajor = MOCK_MAJOR;
  *outMinor = MOCK_MINOR;
}
#endif

#if !defined(MOCK_NO_FACTORY)
BP_EXPORT void* BackendFactory(void) {
#if defined(MOCK_FACTORY_NULL)
  return NULL;
#else
  return (void*)table();
#endif
}
#endif

#if defined(MOCK_SCORE)
BP_EXPORT uint32_t GetBackendScore(void) { return MOCK_SCORE; }
#endif
