/*
 * null_backend.c — the smallest backend Backplane will load: "Null".
 *
 * COPY THIS FILE to start a backend in plain C (or any language that can
 * export C functions). It is written against include/backplane/backend_abi.h
 * ONLY: no C++ SDK, no Backplane library, nothing from the runtime's sources.
 *
 * What it does: it registers, tells the runtime about itself, and answers the
 * support query by rejecting every node with the reason "not implemented". So
 * a model loaded with `--backends Null,CpuRef` runs entirely on CpuRef, and
 * `backplane backends` lists Null as registered. Every other slot returns
 * BP_STATUS_UNIMPLEMENTED, except three kinds that must not fail: configure
 * accepts "num_threads", destroy functions free, and the optional hooks and
 * compile_all are left NULL ("not provided"). Replace the slots one by one as
 * you implement them; look for "YOUR BACKEND" below.
 *
 * Build it with the CMake helper (see CMakeLists.txt next to this file):
 *   backplane_add_backend(NAME Null VENDOR Backplane MODULE SOURCES null_backend.c)
 * which produces Backplane_Null_backend.so — the file name must be
 * <Vendor>_<Id>_backend.so (optionally followed by .<version>), letters and
 * digits only in <Vendor> and <Id>, or the runtime ignores the file.
 *
 * Rules every backend follows (backend_abi.h says each in full):
 *  - Only three symbols need to be visible: GetBackendId, GetVersion,
 *    BackendFactory (and optionally GetBackendScore). Everything else should
 *    be `static` or hidden.
 *  - A fallible call returns bp_status_t*: NULL = success, otherwise an object
 *    made with host->status_create(); the runtime releases it.
 *  - Nothing may unwind out of a slot (no C++ exceptions, no longjmp).
 *  - Every struct you fill starts with struct_size, which you set with
 *    BP_STRUCT_SIZE(type, last_field) as of the header you build against.
 */
#include <backplane/backend_abi.h>

#include <stdlib.h> /* calloc, free */

/* The backend id: [A-Za-z0-9]+, and the <Id> part of the file name. */
#define NULL_BACKEND_ID "Null"

/* The backend API version this file implements: the function table below has
 * exactly the slots of API 1.1. GetVersion() and the table both declare it,
 * and the table's struct_size matches it, so the file keeps building (and
 * keeps meaning the same thing) against any later 1.x header, and loads into
 * every runtime of major 1 whose minor is at least 1. When you need a slot of
 * a newer minor, append it to the table and raise these three together. */
#define NULL_API_MAJOR 1u
#define NULL_API_MINOR 1u
#define NULL_TABLE_SIZE BP_BACKEND_API_SIZE_1_1

/* ======================================================================= */
/* The backend instance                                                    */
/* ======================================================================= */

/* bp_backend_t is declared (not defined) by the ABI: each backend defines it.
 * The runtime creates one instance per Runtime object, through create(), and
 * only ever hands the pointer back to us. Keep per-runtime state here
 * (device handles, thread pools, configuration). */
struct bp_backend {
  const bp_host_api_t* host; /* lives as long as this instance */
};

/* A short helper: every UNIMPLEMENTED slot below reports the same way. The
 * message is copied by status_create, so a string literal is fine. */
static bp_status_t* unimplemented(const bp_host_api_t* host, const char* what) {
  return host->status_create(BP_STATUS_UNIMPLEMENTED, what);
}

/* ======================================================================= */
/* Required slots: create, destroy, get_info, query_support                */
/* ======================================================================= */

/* (required) Called once per Runtime. `host` is the runtime's table of
 * services (status objects, logging, weights, allocator); keep the pointer, it
 * outlives the instance. Refuse here if this machine cannot run the backend
 * (no device, driver too old, runtime too old) by returning a status: the
 * runtime then skips the backend and reports why. */
static bp_status_t* null_create(const bp_host_api_t* host, uint32_t runtime_major,
                                uint32_t runtime_minor, bp_backend_t** out) {
  struct bp_backend* backend;
  (void)runtime_minor; /* a backend that needs a newer runtime checks it here */
  if (out == NULL) return host->status_create(BP_STATUS_INVALID_ARGUMENT, "create: out is NULL");
  *out = NULL;
  if (runtime_major != NULL_API_MAJOR)
    return host->status_create(BP_STATUS_VERSION_MISMATCH,
                               "Null: runtime API major version differs");
  backend = (struct bp_backend*)calloc(1, sizeof *backend);
  if (backend == NULL) return host->status_create(BP_STATUS_OUT_OF_MEMORY, "Null: out of memory");
  backend->host = host;
  /* YOUR BACKEND: open the device, read the environment, etc. */
  host->log(BP_LOG_DEBUG, NULL_BACKEND_ID, "instance created");
  *out = backend; /* owned by the runtime from now on; freed through destroy */
  return NULL;
}

/* (required) Undo create. Must accept NULL. The runtime destroys every
 * compiled partition of this instance before calling it. */
static void null_destroy(bp_backend_t* backend) { free(backend); }

/* (required) Describe the backend. The strings must be static storage: the
 * runtime keeps the pointers. `flags` says which optional features exist
 * (BP_BACKEND_FLAG_COMPILE once compile/execute work, ...). Null has none. */
static bp_status_t* null_get_info(bp_backend_t* backend, bp_backend_info_t* out) {
  (void)backend;
  out->struct_size = BP_STRUCT_SIZE(bp_backend_info_t, flags);
  out->vendor = "Backplane";
  out->description = "skeleton backend: registers, supports nothing";
  out->device_count = 0;
  out->flags = 0;
  return NULL;
}

/* (required) The support query. The runtime passes the whole graph (or the
 * part not yet placed) as a view; for each node i we call
 *   host->report_node(report, i, BP_NODE_SUPPORTED or BP_NODE_REJECTED, reason)
 * A node never reported counts as rejected. The reason is copied, and shows in
 * the runtime's logs and plans, so make it useful ("Conv: groups > 1", not
 * "no"). Nodes rejected here go to the next backend in the preference list
 * (CpuRef last), so nothing breaks while a backend supports little. */
static bp_status_t* null_query_support(bp_backend_t* backend, const bp_graph_view_t* view,
                                       bp_node_report_t* report) {
  size_t i;
  for (i = 0; i < view->num_nodes; ++i) {
    /* YOUR BACKEND: look at view->nodes[i].op_type, its attributes, and the
     * dtypes/shapes of view->values[view->nodes[i].inputs[k]]; report
     * BP_NODE_SUPPORTED for what you can run. */
    backend->host->report_node(report, i, BP_NODE_REJECTED, "not implemented");
  }
  return NULL;
}

/* ======================================================================= */
/* Everything else: BP_STATUS_UNIMPLEMENTED                                */
/* ======================================================================= */

/* Slots are optional in the ABI, but the runtime accepts a backend only if it
 * can run something: either compile + compiled_destroy + context_create +
 * context_destroy + execute (symbolic mode), or execute_node (imperative
 * mode). Null fills them all and says "unimplemented"; since it claims no
 * node, they are never reached. A slot you leave NULL is simply "not
 * provided" (for configure, serialize, device memory, hooks). */

/* Generic key=value configuration. The runtime calls it (when non-NULL) with
 * "num_threads" if the user asked for a thread count, so that key must be
 * accepted or `backplane run --threads N` would fail; unknown keys must be an
 * error so typos are caught. That is the minimum; it is not "unimplemented". */
static bp_status_t* null_configure(bp_backend_t* backend, size_t count, const char* const* keys,
                                   const char* const* values) {
  size_t i;
  (void)values;
  for (i = 0; i < count; ++i) {
    const char* k = keys[i];
    const char* want = "num_threads";
    while (*k != '\0' && *k == *want) ++k, ++want; /* strcmp without <string.h> */
    if (*k != *want)
      return backend->host->status_create(BP_STATUS_INVALID_ARGUMENT,
                                          "Null: unknown configuration key");
  }
  return NULL;
}

/* Objects the compile path would create. Each keeps the host pointer: a slot
 * that receives only a bp_compiled_t* or bp_exec_context_t* needs it to create
 * a status. Null never creates any (compile fails), but the slots below show
 * the pattern. */
struct bp_compiled {
  const bp_host_api_t* host;
};
struct bp_exec_context {
  const bp_host_api_t* host;
};

/* Symbolic mode: turn a view into a compiled partition (*out, owned by the
 * runtime, freed with compiled_destroy). The view lives only for this call:
 * copy what you need. Weights are read through host->data_map_get. Nodes you
 * cannot compile after all are reported BP_NODE_REJECTED in `report`; the
 * runtime then moves them to another backend. */
static bp_status_t* null_compile(bp_backend_t* backend, const bp_graph_view_t* view,
                                 const bp_compile_options_t* options, bp_node_report_t* report,
                                 bp_compiled_t** out) {
  (void)view, (void)options, (void)report;
  *out = NULL;
  return unimplemented(backend->host, "Null: compile is not implemented");
}

/* Must accept NULL, like every destroy function. */
static void null_compiled_destroy(bp_compiled_t* compiled) { free(compiled); }

/* One execution context per concurrent caller: scratch memory lives there, so
 * execute needs no allocation. */
static bp_status_t* null_context_create(bp_compiled_t* compiled, bp_exec_context_t** out) {
  *out = NULL;
  return unimplemented(compiled->host, "Null: context_create is not implemented");
}

static void null_context_destroy(bp_exec_context_t* context) { free(context); }

/* Inputs and outputs follow the view's input/output order; the runtime
 * allocates the outputs with the view's shapes. */
static bp_status_t* null_execute(bp_exec_context_t* context, size_t num_inputs,
                                 const bp_tensor_t* inputs, size_t num_outputs,
                                 const bp_tensor_t* outputs) {
  (void)num_inputs, (void)inputs, (void)num_outputs, (void)outputs;
  return unimplemented(context->host, "Null: execute is not implemented");
}

/* Ahead-of-time compilation: write the compiled partition to `writer`, large
 * data to host->blob_store_add; deserialize rebuilds it. */
static bp_status_t* null_serialize(bp_compiled_t* compiled, bp_blob_store_t* store,
                                   bp_byte_writer_t* writer) {
  (void)store, (void)writer;
  return unimplemented(compiled->host, "Null: serialize is not implemented");
}

static bp_status_t* null_deserialize(bp_backend_t* backend, const bp_graph_view_t* view,
                                     const void* payload, size_t payload_size,
                                     const bp_compile_options_t* options, bp_compiled_t** out) {
  (void)view, (void)payload, (void)payload_size, (void)options;
  *out = NULL;
  return unimplemented(backend->host, "Null: deserialize is not implemented");
}

/* Device memory, for backends whose tensors live off the host
 * (BP_BACKEND_FLAG_DEVICE_MEMORY). */
static bp_status_t* null_memory_alloc(bp_backend_t* backend, uint32_t device, size_t size,
                                      size_t alignment, void** out_ptr) {
  (void)device, (void)size, (void)alignment;
  *out_ptr = NULL;
  return unimplemented(backend->host, "Null: memory_alloc is not implemented");
}

static void null_memory_free(bp_backend_t* backend, uint32_t device, void* ptr) {
  (void)backend, (void)device, (void)ptr;
}

static bp_status_t* null_copy_to_device(bp_backend_t* backend, uint32_t device, void* dst,
                                        const void* src, size_t size) {
  (void)device, (void)dst, (void)src, (void)size;
  return unimplemented(backend->host, "Null: copy_to_device is not implemented");
}

static bp_status_t* null_copy_from_device(bp_backend_t* backend, uint32_t device, void* dst,
                                          const void* src, size_t size) {
  (void)device, (void)dst, (void)src, (void)size;
  return unimplemented(backend->host, "Null: copy_from_device is not implemented");
}

/* Hooks around loading/unloading a model and around memory use (ArmNN's
 * IBackendContext / IMemoryManager). The runtime calls the ones that are
 * non-NULL, so Null leaves them NULL: an UNIMPLEMENTED status here would make
 * every model load fail, and a hook has nothing to refuse. */

/* Imperative mode: run one node now (BP_BACKEND_FLAG_SINGLE_OP). */
static bp_status_t* null_execute_node(bp_backend_t* backend, const bp_graph_view_t* view,
                                      size_t node_index, size_t num_inputs,
                                      const bp_tensor_t* inputs, size_t num_outputs,
                                      const bp_tensor_t* outputs) {
  (void)view, (void)node_index, (void)num_inputs, (void)inputs, (void)num_outputs, (void)outputs;
  return unimplemented(backend->host, "Null: execute_node is not implemented");
}

/* ======================================================================= */
/* The function table and the entry points                                 */
/* ======================================================================= */

/* Static storage, filled in declaration order (C99 designated initialisers
 * would work too). struct_size and api_major/api_minor tell the runtime which
 * API version this table implements: it never reads a slot beyond
 * struct_size, so a backend built for an older minor keeps loading. */
static const bp_backend_api_t null_table = {
    NULL_TABLE_SIZE, /* struct_size */
    NULL_API_MAJOR,  /* api_major */
    NULL_API_MINOR,  /* api_minor */
    null_create, null_destroy, null_get_info, null_configure, null_query_support, null_compile,
    null_compiled_destroy, null_context_create, null_context_destroy, null_execute, null_serialize,
    null_deserialize, null_memory_alloc, null_memory_free, null_copy_to_device,
    null_copy_from_device, NULL, /* before_load_network */
    NULL,                        /* after_load_network */
    NULL,                        /* before_unload_network */
    NULL,                        /* after_unload_network */
    NULL,                        /* memory_acquire */
    NULL,                        /* memory_release */
    null_execute_node,
    /* since 1.1 */
    NULL, /* compile_all: optional; NULL makes the host call compile once per
           * partition, which is what a backend without shared ahead-of-time
           * work wants */
    /* since 1.2 */
    NULL, /* execute_shaped: optional; only a backend that compiles
           * shape-polymorphic partitions or reports data-dependent output
           * shapes needs it */
    /* since 1.3 */
    NULL, /* get_op_schemas: optional; only a backend that defines operators
           * of its own needs it */
    /* since 1.4 */
    NULL, /* get_devices: optional; a backend that drives devices lists them
           * here (name, vendor, memory, ...) */
};

/* The entry points: the only exported symbols, with C linkage and the exact
 * names below (BP_ENTRY_* in the header). The runtime calls GetBackendId and
 * GetVersion first, checks the version (same major, minor <= the runtime's),
 * and only then calls BackendFactory. */

BP_EXPORT const char* GetBackendId(void) { return NULL_BACKEND_ID; }

BP_EXPORT void GetVersion(uint32_t* outMajor, uint32_t* outMinor) {
  *outMajor = NULL_API_MAJOR; /* the API this file implements (see above) */
  *outMinor = NULL_API_MINOR;
}

/* Returns the table (static storage, never freed), or NULL on failure. */
BP_EXPORT void* BackendFactory(void) { return (void*)&null_table; }

/* Optional: GetBackendScore() returning 0 means "cannot run on this machine"
 * (skipped quietly); among several files providing the same id the highest
 * score wins. Without it the score is 1. */
