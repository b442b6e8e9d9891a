/*
 * backend_abi.h — the one contract between the Backplane runtime and a backend.
 *
 * Standalone C99: includes only <stddef.h>, <stdint.h> and <stdbool.h>. A backend
 * builds with this header alone (and, optionally, the header-only backend_sdk.hpp).
 *
 * ---------------------------------------------------------------------------
 * Versioning (API version MAJOR.MINOR, currently 1.6)
 * ---------------------------------------------------------------------------
 * - MINOR grows when something is added in a backward-compatible way: a new slot
 *   appended to the end of a table, a new field appended to the end of a struct,
 *   a new enum value, a new optional entry point.
 * - MAJOR grows when anything released changes: a slot or field is removed,
 *   reordered or retyped, or the meaning of an existing call changes.
 * - A backend built against API M.m loads into a runtime with API M'.m' iff
 *   M == M' and m <= m'. The runtime checks this through GetVersion() *before*
 *   calling BackendFactory().
 * - Every struct that crosses the boundary begins with `size_t struct_size`,
 *   filled by whoever fills the struct, with BP_STRUCT_SIZE(type, last_field) as
 *   of the header it was built against. A reader never touches a field that lies
 *   beyond struct_size. The function tables carry the minor version they were
 *   built for; the host calls a slot only if it exists in that minor
 *   (BP_TABLE_HAS) and is non-NULL. Released layouts are frozen by
 *   static_asserts in tests/abi/.
 *
 * ---------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------
 * A fallible call returns `bp_status_t*`: NULL means success; otherwise an
 * object created with bp_host_api_t.status_create, which the *receiver* owns and
 * releases with bp_host_api_t.status_release (the host does that for statuses a
 * backend returns). Its code is one of bp_status_code_t (never BP_STATUS_OK);
 * a receiver treats a code it does not know as a failure. No C++ exception may
 * cross this boundary: every slot must be noexcept (backend_sdk.hpp wraps each
 * slot in a catch-all for you).
 *
 * ---------------------------------------------------------------------------
 * Threads
 * ---------------------------------------------------------------------------
 * The host serialises calls on one bp_backend_t except where a slot says
 * otherwise. `execute` may be called concurrently on *different* execution
 * contexts of the same compiled partition; a compiled partition is immutable
 * once compile/deserialize returned. The host table is thread-safe.
 * Since 1.5 the host lends a backend its thread pool for each execute_shaped
 * (bp_execute_args_t.thread_pool, bp_host_api_t.parallel_for): a CPU backend
 * parallelises on it instead of keeping threads of its own, so that the
 * partitions of two backends that alternate in one run do not fight over
 * the cores.
 */
#ifndef BACKPLANE_BACKEND_ABI_H_
#define BACKPLANE_BACKEND_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================= */
/* Version and helpers                                                      */
/* ======================================================================= */

#define BP_API_VERSION_MAJOR 1u
#define BP_API_VERSION_MINOR 6u

/* Size of a struct up to and including `last_field`: the struct_size a
 * producer built against this header writes. */
#define BP_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* True if a struct of `type` whose struct_size is `size` contains `field`. */
#define BP_HAS_FIELD(type, field, size) \
  ((size) >= offsetof(type, field) + sizeof(((type*)0)->field))

/* Symbol visibility for the entry points of a backend shared object. */
#if defined(_WIN32)
#define BP_EXPORT __declspec(dllexport)
#else
#define BP_EXPORT __attribute__((visibility("default")))
#endif

/* ======================================================================= */
/* Opaque objects                                                          */
/* ======================================================================= */

/* Created by the host (status_create), released by its receiver. */
typedef struct bp_status bp_status_t;
/* Host-owned, read-only map from weight keys to bytes. Lives at least as long
 * as the call it is passed to; for compile/deserialize, as long as the compiled
 * partition (buffers obtained from it must still be freed with buffer_free). */
typedef struct bp_named_data_map bp_named_data_map_t;
/* Host-owned store that collects named blobs while compiling ahead of time. */
typedef struct bp_blob_store bp_blob_store_t;
/* Host-owned byte sink for serialized payloads. */
typedef struct bp_byte_writer bp_byte_writer_t;
/* Host-owned record of a support query or compile outcome. */
typedef struct bp_node_report bp_node_report_t;
/* Host-owned thread pool (since 1.5): lent to a backend for one
 * execute_shaped call (bp_execute_args_t.thread_pool); see
 * bp_host_api_t.parallel_for. */
typedef struct bp_thread_pool bp_thread_pool_t;

/* Backend-owned objects; the backend defines them. */
typedef struct bp_backend bp_backend_t;           /* one per runtime */
typedef struct bp_compiled bp_compiled_t;         /* one compiled partition */
typedef struct bp_exec_context bp_exec_context_t; /* one per concurrent caller */

/* ======================================================================= */
/* Enumerations                                                             */
/* ======================================================================= */

/* Status codes: one list, shared with the runtime's C++ API (backplane::
 * StatusCode in status.hpp has the same set with the same numbers, and the
 * runtime converts by value, so a code keeps its meaning across the boundary
 * in both directions).
 *
 * The list is append-only: a number never changes meaning, new codes take new
 * numbers, and adding one does not bump the minor version. So a receiver may
 * meet a code it does not know, from a newer peer: it must treat it as a
 * failure of unspecified kind, never as success. The runtime reports an
 * unknown code from a backend as a backend error naming the number. A non-NULL
 * status whose code is BP_STATUS_OK is a contract violation, reported the
 * same way. */
typedef enum bp_status_code {
  BP_STATUS_OK = 0,               /* never in a status object: success is NULL */
  BP_STATUS_INVALID_ARGUMENT = 1, /* the caller passed something wrong */
  BP_STATUS_UNSUPPORTED = 2,      /* valid, but this backend cannot do it (not a bug) */
  BP_STATUS_UNIMPLEMENTED = 3,    /* the slot exists but is not implemented */
  BP_STATUS_OUT_OF_MEMORY = 4,
  BP_STATUS_NOT_FOUND = 5,        /* a key, file or object does not exist */
  BP_STATUS_CORRUPT_DATA = 6,     /* a payload or file is malformed or fails its checksum */
  BP_STATUS_VERSION_MISMATCH = 7, /* incompatible versions (API, payload format) */
  BP_STATUS_DEVICE_ERROR = 8,     /* the device or its driver failed */
  BP_STATUS_INTERNAL = 9,         /* a bug in whoever created the status */
  /* ---- appended after 1.1 was released (no minor bump, see above) ---- */
  BP_STATUS_IO_ERROR = 10,      /* the operating system refused (open, read, mmap) */
  BP_STATUS_BACKEND_ERROR = 11, /* a backend failed in a way no code above says; the
                                 * runtime also uses it for a backend that broke the
                                 * contract (threw, crashed, returned an unknown code) */
  /* Not a code: makes every value from 0 to INT32_MAX a value of this type,
   * so a code from a newer peer is one too (C++ leaves a value beyond an
   * enum's range undefined). */
  BP_STATUS_FORCE_INT32_ = 0x7FFFFFFF
} bp_status_code_t;

/* Element types. Values equal ONNX TensorProto.DataType. */
typedef enum bp_dtype {
  BP_DTYPE_UNDEFINED = 0,
  BP_DTYPE_FLOAT32 = 1,
  BP_DTYPE_UINT8 = 2,
  BP_DTYPE_INT8 = 3,
  BP_DTYPE_INT32 = 6,
  BP_DTYPE_INT64 = 7,
  BP_DTYPE_BOOL = 9, /* one byte per element, 0 or 1 */
  BP_DTYPE_FLOAT16 = 10,
  /* Since API 1.3. A backend built against an earlier header never claims a
   * node with these (its support check does not know them). */
  BP_DTYPE_UINT16 = 4,
  BP_DTYPE_INT16 = 5,
  BP_DTYPE_FLOAT64 = 11,
  BP_DTYPE_UINT32 = 12,
  BP_DTYPE_UINT64 = 13,
  BP_DTYPE_BFLOAT16 = 16 /* the upper 16 bits of a float32 */
} bp_dtype_t;

/* Attribute kinds. Values equal ONNX AttributeProto.AttributeType. */
typedef enum bp_attr_type {
  BP_ATTR_UNDEFINED = 0,
  BP_ATTR_FLOAT = 1,
  BP_ATTR_INT = 2,
  BP_ATTR_STRING = 3,
  BP_ATTR_TENSOR = 4,
  BP_ATTR_FLOATS = 6,
  BP_ATTR_INTS = 7,
  BP_ATTR_STRINGS = 8
} bp_attr_type_t;

typedef enum bp_log_level {
  BP_LOG_TRACE = 0,
  BP_LOG_DEBUG = 1,
  BP_LOG_INFO = 2,
  BP_LOG_WARN = 3,
  BP_LOG_ERROR = 4
} bp_log_level_t;

/* bp_backend_info_t.flags */
#define BP_BACKEND_FLAG_DEVICE_MEMORY (1u << 0) /* tensors live in backend memory */
#define BP_BACKEND_FLAG_SERIALIZE (1u << 1)     /* serialize/deserialize implemented */
#define BP_BACKEND_FLAG_SINGLE_OP (1u << 2)     /* execute_node implemented (imperative) */
#define BP_BACKEND_FLAG_COMPILE (1u << 3)       /* compile/execute implemented (symbolic) */
/* since 1.2: compile accepts bp_compile_options_t.shape_polymorphic (a view
 * whose non-constant dims are -1, compiled once for every shape) and
 * execute_shaped runs it at the shapes of each run. */
#define BP_BACKEND_FLAG_SHAPE_POLYMORPHIC (1u << 4)

/* bp_value_t.flags */
#define BP_VALUE_CONSTANT (1u << 0)    /* bytes reachable through data_key */
#define BP_VALUE_VIEW_INPUT (1u << 1)  /* produced outside this view */
#define BP_VALUE_VIEW_OUTPUT (1u << 2) /* consumed outside this view */

/* Outcome of one node in bp_host_api_t.report_node (ArmNN OptimizationViews). */
typedef enum bp_node_outcome {
  BP_NODE_SUPPORTED = 0, /* query: supported;  compile: taken (substituted) */
  BP_NODE_REJECTED = 1,  /* query: unsupported; compile: failed, give it to another backend */
  BP_NODE_UNTOUCHED = 2  /* compile only: left as is, the host decides */
} bp_node_outcome_t;

/* ======================================================================= */
/* Plain data crossing the boundary                                         */
/* ======================================================================= */

/* A dense, row-major tensor. Shapes are fully static when passed to execute.
 * `data` is host memory unless `device` is non-zero, in which case it is a
 * pointer returned by the backend's memory_alloc for device `device - 1`.
 * (Since 1.2, an output of execute_shaped whose shape depends on data has
 * data == NULL and -1 in the dims the host could not know; see
 * bp_execute_args_t.) */
typedef struct bp_tensor {
  size_t struct_size;
  bp_dtype_t dtype;
  size_t rank;
  const int64_t* shape; /* rank entries; owned by the caller of the slot */
  void* data;           /* owned by the caller; valid for the duration of the call */
  size_t size_bytes;
  uint32_t device; /* 0 = host memory; k > 0 = the backend's device k-1 */
} bp_tensor_t;

/* A constant tensor embedded in an attribute (e.g. ConstantOfShape.value). */
typedef struct bp_attr_tensor {
  size_t struct_size;
  bp_dtype_t dtype;
  size_t rank;
  const int64_t* shape;
  const void* data;
  size_t size_bytes;
} bp_attr_tensor_t;

/* One node attribute. Only the members matching `type` are meaningful. All
 * pointers are owned by the view and live as long as the view. */
typedef struct bp_attribute {
  size_t struct_size;
  const char* name;
  bp_attr_type_t type;
  int64_t i;                  /* BP_ATTR_INT */
  float f;                    /* BP_ATTR_FLOAT */
  const char* s;              /* BP_ATTR_STRING (NUL-terminated) */
  size_t count;               /* element count of the list kinds */
  const int64_t* ints;        /* BP_ATTR_INTS */
  const float* floats;        /* BP_ATTR_FLOATS */
  const char* const* strings; /* BP_ATTR_STRINGS */
  const bp_attr_tensor_t* t;  /* BP_ATTR_TENSOR */
} bp_attribute_t;

/* One value (tensor edge) in a graph view. */
typedef struct bp_value {
  size_t struct_size;
  const char* name;
  bp_dtype_t dtype;
  size_t rank;
  const int64_t* shape; /* static: every dim >= 0, except in a view compiled with
                         * shape_polymorphic (since 1.2), where a dim of a
                         * non-constant value is -1: known only at execute */
  uint32_t flags;       /* BP_VALUE_* */
  const char* data_key; /* for BP_VALUE_CONSTANT: key into the view's weights */
} bp_value_t;

/* One node. Inputs/outputs index into bp_graph_view_t.values; an absent
 * optional input is -1. */
typedef struct bp_node {
  size_t struct_size;
  const char* name;
  const char* op_type;
  const char* domain; /* "" for the default ONNX domain */
  int64_t opset;      /* opset version of that domain in the model */
  size_t num_inputs;
  const int32_t* inputs;
  size_t num_outputs;
  const int32_t* outputs;
  size_t num_attributes;
  const bp_attribute_t* attributes;
} bp_node_t;

/* A subgraph as the backend sees it. Nodes are in a valid execution order.
 * Everything is owned by the host and lives for the duration of the call it
 * is passed to; a backend that needs any of it later copies it. Weights are
 * never copied into the view: read them with host->data_map_get(weights, key). */
typedef struct bp_graph_view {
  size_t struct_size;
  const char* name; /* e.g. "resnet18/partition_0" */
  size_t num_values;
  const bp_value_t* values;
  size_t num_nodes;
  const bp_node_t* nodes;
  size_t num_inputs; /* execute() inputs, in this order */
  const int32_t* inputs;
  size_t num_outputs; /* execute() outputs, in this order */
  const int32_t* outputs;
  const bp_named_data_map_t* weights;
} bp_graph_view_t;

/* A read-only byte range handed out by a NamedDataMap. Release it with
 * host->buffer_free once done (the data may be mmapped file pages). */
typedef struct bp_buffer {
  size_t struct_size;
  const void* data;
  size_t size;
  void* host_private; /* do not touch */
} bp_buffer_t;

typedef struct bp_backend_info {
  size_t struct_size;
  const char* vendor;      /* static storage of the backend */
  const char* description; /* static storage of the backend */
  uint32_t device_count;   /* devices of BP_BACKEND_FLAG_DEVICE_MEMORY */
  uint32_t flags;          /* BP_BACKEND_FLAG_* */
} bp_backend_info_t;

/* One device a backend can run on (since 1.4), as get_devices reports it:
 * what a user picks a device by (`backplane backends --json` lists them).
 * Strings are owned by the backend and live until its next get_devices call
 * or its destroy. */
typedef struct bp_device_info {
  size_t struct_size;
  const char* name;           /* e.g. "NVIDIA GeForce RTX 3060", never NULL */
  const char* vendor;         /* never NULL; may be "" */
  const char* driver_version; /* never NULL; may be "" */
  const char* kind;           /* "gpu", "cpu", "accelerator" or "other" */
  uint64_t memory_bytes;      /* device memory; 0 if unknown */
  uint32_t compute_units;     /* 0 if unknown */
  bool selected;              /* the device this instance runs on (its device 0) */
} bp_device_info_t;

/* Options given to compile. */
typedef struct bp_compile_options {
  size_t struct_size;
  uint32_t num_threads;        /* 0 = backend default */
  bool ahead_of_time;          /* a serialize call will follow */
  bp_blob_store_t* blob_store; /* non-NULL when ahead_of_time */
  /* ---- since 1.2 ---- */
  /* Only for a backend with BP_BACKEND_FLAG_SHAPE_POLYMORPHIC. The view gives
   * every non-constant value its dtype and rank but -1 for each dim
   * (constants keep their shapes); values that are constant for one set of
   * input shapes only (e.g. a Reshape's target computed from an input's
   * Shape) are view inputs, not constants. The partition must run at any
   * shapes, told them by execute_shaped. A backend that cannot do so for this
   * view returns BP_STATUS_UNSUPPORTED: the host then compiles a view with
   * concrete shapes instead, once per set of input shapes. */
  bool shape_polymorphic;
} bp_compile_options_t;

/* A concrete shape (since 1.2). Plain pair, never extended: arrays of it
 * are indexed by sizeof(bp_shape_t). */
typedef struct bp_shape {
  size_t rank;
  const int64_t* dims; /* rank entries (NULL when rank is 0) */
} bp_shape_t;

/* Host-owned receiver of outputs whose shape depends on data (since 1.2). */
typedef struct bp_output_sink bp_output_sink_t;

/* Host-owned recorder of a profiled execute_shaped call (since 1.6). */
typedef struct bp_profile bp_profile_t;

/* Arguments of execute_shaped (since 1.2). Everything is owned by the host and
 * valid for the duration of the call. */
typedef struct bp_execute_args {
  size_t struct_size;
  size_t num_inputs; /* in the view's input order */
  const bp_tensor_t* inputs;
  size_t num_outputs; /* in the view's output order */
  const bp_tensor_t* outputs;
  /* The shape of every value of the view the partition was compiled (or
   * deserialized) from, indexed like bp_graph_view_t.values; constants
   * included. For a value whose shape depends on data the host could not
   * know (e.g. NonZero's output) some dims are -1: the backend learns them
   * while executing. An output with such a shape has data == NULL; the
   * backend allocates it with host->output_allocate(sink, output_index,
   * ...) once it knows the shape, and the host sizes everything downstream
   * from it. */
  size_t num_values;
  const bp_shape_t* value_shapes;
  bp_output_sink_t* sink;
  /* ---- since 1.5 (read only if struct_size covers them) ---- */
  /* The host's thread pool for this call, or NULL (then run on the calling
   * thread alone). Owned by the host and valid for the duration of this call
   * only: give it to host->parallel_for / host->thread_pool_size, never keep
   * it. Its size is the thread count the host gives this run (the runtime's
   * num_threads), the calling thread included. */
  bp_thread_pool_t* thread_pool;
  uint32_t flags; /* BP_EXECUTE_* */
  /* ---- since 1.6 (read only if struct_size covers them) ---- */
  /* Non-NULL while the host profiles this run: a backend that can time its
   * nodes reports each with host->profile_node(profile, ...); one that does
   * not is timed as a whole partition. Owned by the host, valid for this
   * call only. */
  bp_profile_t* profile;
} bp_execute_args_t;

/* bp_execute_args_t.flags (since 1.5).
 * BP_EXECUTE_EDGE_FOLLOWS: the partition the host runs next (later in this
 * run, or the first one of the next run) belongs to another backend. A
 * backend that keeps threads of its own waiting for work (e.g. an OpenMP
 * team spinning between parallel regions) should let them sleep before it
 * returns, so that they do not take the cores the other backend is about to
 * use. Never set when the next partition is this backend's own (a model that
 * runs whole on one backend never sees it), so a backend may spend some
 * microseconds on it. A hint only: results must not depend on it. The host
 * leaves it unset when BACKPLANE_EDGE_YIELD=0 (to measure without it). */
#define BP_EXECUTE_EDGE_FOLLOWS (1u << 0)

/* ----------------------------------------------------------------------- */
/* Backend-defined operators (since 1.3)                                    */
/* ----------------------------------------------------------------------- */
/* A backend may define operators of a domain of its own (e.g. "com.example"
 * Swish2), which ONNX and the runtime do not know: it describes each with a
 * bp_op_schema_t (get_op_schemas). The runtime then infers their output types
 * through the schema's callback, and places a node of such an operator only
 * on a backend that defined it (and claims it in query_support). A backend
 * cannot redefine an operator of the default ONNX domain, nor one the runtime
 * already knows. */

/* Host-owned receiver of an inference callback's results. */
typedef struct bp_infer_result bp_infer_result_t;

/* Bound for max_inputs / max_outputs: any number. */
#define BP_OP_UNBOUNDED UINT32_MAX

/* One attribute an operator accepts. A node with an attribute the schema
 * does not list, or of another type, or without a required one, is rejected
 * before the callback runs. */
typedef struct bp_op_attr {
  size_t struct_size;
  const char* name;
  bp_attr_type_t type;
  bool required;
} bp_op_attr_t;

/* What an inference callback is given. Everything is owned by the host and
 * valid for the duration of the call. */
typedef struct bp_infer_args {
  size_t struct_size;
  /* The node: name, op_type, domain, opset, attributes. Its inputs[i] and
   * outputs[i] are i, or -1 for an omitted optional one (there is no view
   * to index: use the arrays below). */
  const bp_node_t* node;
  size_t num_inputs;
  const bp_dtype_t* input_dtypes; /* BP_DTYPE_UNDEFINED for an omitted input */
  const bp_shape_t* input_shapes; /* concrete: every dim >= 0 */
  /* The bytes of input i when it is a constant (row-major, of its dtype and
   * shape), else NULL: e.g. a target shape given as an input. */
  const void* const* input_constants;
  size_t num_outputs;
  bp_infer_result_t* result; /* for host->infer_set_output */
} bp_infer_args_t;

/* Infers the dtype and shape of every present output of a node from its
 * inputs' and attributes (host->infer_set_output for each). Returns NULL, or
 * a status whose message says what is wrong with the node (the host adds the
 * node's name). May be called from any thread, concurrently, at any time
 * while the backend instance lives (the host does not serialise it): keep it
 * a pure function of its arguments. */
typedef bp_status_t* (*bp_op_infer_fn)(void* user_data, const bp_infer_args_t* args);

/* One operator a backend defines. Owned by the backend; every pointer in it
 * lives as long as the backend instance. */
typedef struct bp_op_schema {
  size_t struct_size;
  const char* domain;    /* the backend's own: not "" nor "ai.onnx" */
  const char* name;      /* op_type */
  int32_t since_version; /* >= 1: the first opset of `domain` it exists in */
  uint32_t min_inputs;   /* inputs [0, min_inputs) are required */
  uint32_t max_inputs;   /* >= min_inputs, or BP_OP_UNBOUNDED */
  uint32_t min_outputs;
  uint32_t max_outputs; /* >= min_outputs, or BP_OP_UNBOUNDED */
  size_t num_attributes;
  const bp_op_attr_t* attributes;
  bp_op_infer_fn infer; /* required */
  void* user_data;      /* passed to infer as is */
  const char* doc;      /* one line for `backplane ops`; may be NULL */
} bp_op_schema_t;

/* ======================================================================= */
/* Host table: runtime -> backend                                           */
/* ======================================================================= */

typedef struct bp_host_api {
  size_t struct_size;
  uint32_t api_major;
  uint32_t api_minor;

  /* Status objects. status_create copies `message` (NULL reads as ""); `code`
   * is a failure (not BP_STATUS_OK) and is kept as given, even if this host
   * does not know it. The returned object is owned by whoever receives it.
   * status_code of NULL is BP_STATUS_OK. status_release accepts NULL. */
  bp_status_t* (*status_create)(bp_status_code_t code, const char* message);
  bp_status_code_t (*status_code)(const bp_status_t* status);
  const char* (*status_message)(const bp_status_t* status); /* lives as long as status */
  void (*status_release)(bp_status_t* status);

  /* Logging through the runtime's logger. `message` is copied. */
  void (*log)(bp_log_level_t level, const char* backend_id, const char* message);

  /* NamedDataMap (ExecuTorch). get_data fills *out; free it with buffer_free.
   * get_key_at: *out_key is owned by the map and lives as long as the map. */
  bp_status_t* (*data_map_get)(const bp_named_data_map_t* map, const char* key, bp_buffer_t* out);
  void (*buffer_free)(bp_buffer_t* buffer);
  size_t (*data_map_num_keys)(const bp_named_data_map_t* map);
  bp_status_t* (*data_map_key_at)(const bp_named_data_map_t* map, size_t index,
                                  const char** out_key);

  /* NamedBlobStore (ahead-of-time compile only). Copies `data`. Same key with
   * different bytes is an error; identical bytes under two keys are stored
   * once. alignment: power of two, 0 = default (64). external_file: name of a
   * data file to place the blob in, or NULL for the artifact itself. */
  bp_status_t* (*blob_store_add)(bp_blob_store_t* store, const char* key, const void* data,
                                 size_t size, size_t alignment, const char* external_file);

  /* Appends bytes to a serialized payload. */
  bp_status_t* (*writer_append)(bp_byte_writer_t* writer, const void* data, size_t size);

  /* Records the outcome of node `node_index` of the view being queried or
   * compiled; `reason` (copied, may be NULL) says why it was rejected. With
   * BP_NODE_SUPPORTED during compile, a non-empty `reason` is a note on how
   * the node runs ("int8 convolution", "float: no int8 form of Concat"),
   * which hosts from API 1.6 show in their plan (`backplane partition`). */
  void (*report_node)(bp_node_report_t* report, size_t node_index, bp_node_outcome_t outcome,
                      const char* reason);

  /* Aligned host memory. alignment: power of two. free accepts NULL. */
  void* (*alloc)(size_t size, size_t alignment);
  void (*free)(void* ptr);

  /* ---- since 1.2 (check api_minor or struct_size before calling) ------- */

  /* During execute_shaped: output `output_index` (whose shape depended on
   * data) has shape `dims` (rank entries, all >= 0). The host allocates it
   * in the memory the output belongs to (host memory, or this backend's
   * device memory for a device partition) and returns it in *out_data,
   * owned by the host; the backend writes the output there before returning.
   * Once per output per call; an output with a known shape needs no call. */
  bp_status_t* (*output_allocate)(bp_output_sink_t* sink, size_t output_index, size_t rank,
                                  const int64_t* dims, void** out_data);

  /* ---- since 1.3 (check api_minor or struct_size before calling) ------- */

  /* From an operator's inference callback (bp_op_schema_t.infer): output
   * `output_index` of the node has element type `dtype` and shape `dims`
   * (rank entries, all >= 0; copied). Once per present output; an output the
   * callback leaves unset is an error naming it. */
  bp_status_t* (*infer_set_output)(bp_infer_result_t* result, size_t output_index, bp_dtype_t dtype,
                                   size_t rank, const int64_t* dims);

  /* ---- since 1.5 (check api_minor or struct_size before calling) ------- */

  /* The number of threads `pool` runs a parallel_for on, the calling thread
   * included: >= 1; 1 for a NULL pool. Split work by it, never assume it. */
  uint32_t (*thread_pool_size)(const bp_thread_pool_t* pool);

  /* Runs fn(ctx, begin, end) over disjoint chunks that together cover
   * [0, n) exactly once, and returns when every chunk has returned. Chunks
   * are at least `grain` items (0 reads as 1) except the last, and are
   * handed out dynamically: the calling thread takes chunks too, so a worker
   * that is slow to start (descheduled on a busy machine) never holds the
   * call up: the caller runs its share. Which thread runs which chunk, and
   * in what order, is unspecified: fn must not depend on it (write disjoint
   * outputs; reduce per chunk, then combine on the caller in a fixed order
   * for results that do not depend on the thread count).
   * - n == 0 calls nothing; n <= grain, a NULL pool or a pool of size 1 run
   *   fn(ctx, 0, n) on the calling thread.
   * - Nested calls (from inside fn) are safe: they run inline, on the thread
   *   that made them. Calls from several threads at once (sessions running
   *   concurrently) are safe: a call that finds the pool's workers busy runs
   *   its chunks on its own thread.
   * - fn must not throw or longjmp across this call (C ABI); a C++ exception
   *   that reaches the host anyway is caught, the chunks not yet started are
   *   skipped and a BP_STATUS_BACKEND_ERROR status is returned. fn reports
   *   failures through ctx (backend_sdk.hpp's parallel_for carries an
   *   exception back to the caller for you).
   * Returns NULL, or a status the caller owns. */
  bp_status_t* (*parallel_for)(bp_thread_pool_t* pool, size_t n, size_t grain,
                               void (*fn)(void* ctx, size_t begin, size_t end), void* ctx);

  /* ---- since 1.6 (check api_minor or struct_size before calling) ------- */

  /* The host's clock for profile_node: nanoseconds since an arbitrary
   * origin, monotonic. Cheap enough to call around every node. */
  uint64_t (*clock_ns)(void);

  /* During a profiled execute_shaped (bp_execute_args_t.profile non-NULL):
   * some work of the partition ran from `begin_ns` to `end_ns` (clock_ns).
   * - node_index: the node of the partition's view it was, or
   *   BP_PROFILE_NO_NODE for work that is no one node's, or whose node the
   *   backend no longer knows (a kernel fused from several).
   * - op_type: what the profile's summary sums it under; NULL: the node's
   *   operator type. A backend may name its own kinds of work here
   *   ("convolution", "reorder").
   * - label: what the trace shows of it; NULL: the node's name.
   * Strings are copied. Call it from the thread that called execute_shaped,
   * after the work: spans of one call must not overlap. */
  void (*profile_node)(bp_profile_t* profile, size_t node_index, const char* op_type,
                       const char* label, uint64_t begin_ns, uint64_t end_ns);
} bp_host_api_t;

/* profile_node's node_index for work that is no one node's (since 1.6). */
#define BP_PROFILE_NO_NODE ((size_t)-1)

/* The struct_size of a bp_host_api_t as of each released API. */
#define BP_HOST_API_SIZE_1_0 BP_STRUCT_SIZE(bp_host_api_t, free)
#define BP_HOST_API_SIZE_1_2 BP_STRUCT_SIZE(bp_host_api_t, output_allocate)
#define BP_HOST_API_SIZE_1_3 BP_STRUCT_SIZE(bp_host_api_t, infer_set_output)
#define BP_HOST_API_SIZE_1_5 BP_STRUCT_SIZE(bp_host_api_t, parallel_for)
#define BP_HOST_API_SIZE_1_6 BP_STRUCT_SIZE(bp_host_api_t, profile_node)

/* The struct_size of a bp_execute_args_t as of each API that changed it. */
#define BP_EXECUTE_ARGS_SIZE_1_2 BP_STRUCT_SIZE(bp_execute_args_t, sink)
#define BP_EXECUTE_ARGS_SIZE_1_5 BP_STRUCT_SIZE(bp_execute_args_t, flags)
#define BP_EXECUTE_ARGS_SIZE_1_6 BP_STRUCT_SIZE(bp_execute_args_t, profile)

/* ======================================================================= */
/* Backend table: backend -> runtime                                        */
/* ======================================================================= */

/* Returned by BackendFactory(): static storage of the backend, never freed.
 * Slots marked (required) must be non-NULL; all others may be NULL. */
typedef struct bp_backend_api {
  size_t struct_size;
  uint32_t api_major; /* the header version the backend was built against */
  uint32_t api_minor;

  /* ---- since 1.0 ------------------------------------------------------ */

  /* (required) Create this runtime's instance. `host` lives as long as the
   * instance. The backend may refuse (e.g. no device, runtime too old) by
   * returning a status. *out is owned by the host and freed with destroy. */
  bp_status_t* (*create)(const bp_host_api_t* host, uint32_t runtime_major, uint32_t runtime_minor,
                         bp_backend_t** out);
  /* (required) Accepts NULL. Every compiled partition is destroyed first. */
  void (*destroy)(bp_backend_t* backend);

  /* (required) Strings in *out are static storage of the backend. The host
   * asks after create and again after each configure call, which may change
   * what the backend reports (e.g. the device a configure key chose). */
  bp_status_t* (*get_info)(bp_backend_t* backend, bp_backend_info_t* out);

  /* Generic key=value configuration, before any compile. Unknown keys are an
   * error (BP_STATUS_INVALID_ARGUMENT) so typos are caught. Keys every backend
   * should honour: "num_threads". */
  bp_status_t* (*configure)(bp_backend_t* backend, size_t count, const char* const* keys,
                            const char* const* values);

  /* (required) Whole-graph support query. For each node the backend calls
   * host->report_node(report, i, BP_NODE_SUPPORTED or BP_NODE_REJECTED,
   * reason). A node never reported counts as rejected ("not claimed"). */
  bp_status_t* (*query_support)(bp_backend_t* backend, const bp_graph_view_t* view,
                                bp_node_report_t* report);

  /* Compile a view. The backend may report per node BP_NODE_REJECTED (failed:
   * the host moves it to another backend and compiles again) or
   * BP_NODE_UNTOUCHED; nodes it does not report are taken. *out is owned by
   * the host and freed with compiled_destroy. The view's weights map outlives
   * the compiled partition. */
  bp_status_t* (*compile)(bp_backend_t* backend, const bp_graph_view_t* view,
                          const bp_compile_options_t* options, bp_node_report_t* report,
                          bp_compiled_t** out);
  void (*compiled_destroy)(bp_compiled_t* compiled); /* accepts NULL */

  /* One execution context per concurrent caller: holds scratch memory, so
   * steady-state execute needs no allocation. Thread-safe on one compiled
   * partition. */
  bp_status_t* (*context_create)(bp_compiled_t* compiled, bp_exec_context_t** out);
  void (*context_destroy)(bp_exec_context_t* context); /* accepts NULL */

  /* Run a compiled partition. inputs/outputs follow the view's input/output
   * order; output tensors are allocated by the host with the view's shapes.
   * Different contexts may execute concurrently.
   * Asynchrony (a clarification written with the first real device backend,
   * GpuOcl; every backend so far is synchronous, which stays valid): outputs
   * in host memory (device == 0) are complete when execute returns. Outputs
   * in the backend's own device memory may still be in flight: the backend
   * only guarantees that its later calls (execute, execute_node,
   * copy_from_device, copy_to_device, memory_free) observe the work in the
   * order it was submitted, e.g. through one in-order queue per device.
   * copy_from_device therefore returns only once the value it reads is
   * complete: that is where the host waits. An error of work in flight is
   * reported by the call that waits for it. */
  bp_status_t* (*execute)(bp_exec_context_t* context, size_t num_inputs, const bp_tensor_t* inputs,
                          size_t num_outputs, const bp_tensor_t* outputs);

  /* Ahead of time: write what deserialize needs to `writer`; large data goes
   * to host->blob_store_add so it is shared and mmap-able. UNSUPPORTED: this
   * partition's compiled form cannot be written (the host then keeps its
   * portable graph in the artifact and compiles it at load). */
  bp_status_t* (*serialize)(bp_compiled_t* compiled, bp_blob_store_t* store,
                            bp_byte_writer_t* writer);
  /* Rebuild a compiled partition from a payload. `view` is the same
   * partition as at compile time; `payload` lives only for this call. */
  bp_status_t* (*deserialize)(bp_backend_t* backend, const bp_graph_view_t* view,
                              const void* payload, size_t payload_size,
                              const bp_compile_options_t* options, bp_compiled_t** out);

  /* Optional device memory (BP_BACKEND_FLAG_DEVICE_MEMORY). Device pointers
   * are opaque to the host; it only passes them back to this backend. */
  bp_status_t* (*memory_alloc)(bp_backend_t* backend, uint32_t device, size_t size,
                               size_t alignment, void** out_ptr);
  void (*memory_free)(bp_backend_t* backend, uint32_t device, void* ptr);
  bp_status_t* (*copy_to_device)(bp_backend_t* backend, uint32_t device, void* dst, const void* src,
                                 size_t size);
  bp_status_t* (*copy_from_device)(bp_backend_t* backend, uint32_t device, void* dst,
                                   const void* src, size_t size);

  /* Optional hooks (ArmNN IBackendContext / IMemoryManager). network_id names
   * one loaded model in this runtime. */
  bp_status_t* (*before_load_network)(bp_backend_t* backend, uint64_t network_id);
  bp_status_t* (*after_load_network)(bp_backend_t* backend, uint64_t network_id);
  bp_status_t* (*before_unload_network)(bp_backend_t* backend, uint64_t network_id);
  bp_status_t* (*after_unload_network)(bp_backend_t* backend, uint64_t network_id);
  bp_status_t* (*memory_acquire)(bp_backend_t* backend);
  bp_status_t* (*memory_release)(bp_backend_t* backend);

  /* Optional imperative mode (BP_BACKEND_FLAG_SINGLE_OP): run node
   * `node_index` of `view` now. inputs/outputs are ALL of that node's inputs
   * and outputs in node order (constants included; an omitted optional one
   * has data == NULL), in the backend's memory if it has device memory.
   * May be called concurrently. */
  bp_status_t* (*execute_node)(bp_backend_t* backend, const bp_graph_view_t* view,
                               size_t node_index, size_t num_inputs, const bp_tensor_t* inputs,
                               size_t num_outputs, const bp_tensor_t* outputs);

  /* ---- since 1.1 ------------------------------------------------------ */

  /* Ahead of time, compile every partition this backend got, of every method
   * of the artifact, in one call (ExecuTorch's preprocess_all), so work and
   * weights shared between them are shared. out[i] and reports[i] belong to
   * views[i]; outcomes as for compile. Optional: without it the host calls
   * compile once per view. */
  bp_status_t* (*compile_all)(bp_backend_t* backend, size_t num_views,
                              const bp_graph_view_t* const* views,
                              const bp_compile_options_t* options, bp_node_report_t* const* reports,
                              bp_compiled_t** out);

  /* ---- since 1.2 ------------------------------------------------------ */

  /* Run a compiled partition, told the shape of every value of its view
   * (bp_execute_args_t). With it the host calls this instead of execute.
   * Required for a partition compiled with shape_polymorphic, whose input
   * and output shapes change from call to call; for any other partition the
   * shapes are the view's, except outputs whose shape depends on data.
   * Threading as for execute. Since 1.5 args also lends the host's thread
   * pool and says whether another backend's partition follows: a backend
   * that wants either implements this slot (plain execute gets neither). */
  bp_status_t* (*execute_shaped)(bp_exec_context_t* context, const bp_execute_args_t* args);

  /* ---- since 1.3 ------------------------------------------------------ */

  /* The operators this backend defines (bp_op_schema_t), asked once, right
   * after create. *out_schemas (*out_count entries; NULL when 0) is owned by
   * the backend and lives as long as the instance. A schema the runtime
   * cannot accept (a default-domain or already known operator, a malformed
   * entry) makes the backend fail to load, with the reason. */
  bp_status_t* (*get_op_schemas)(bp_backend_t* backend, size_t* out_count,
                                 const bp_op_schema_t** out_schemas);

  /* ---- since 1.4 ------------------------------------------------------ */

  /* Every device the backend found on this machine, selected or not (a
   * backend choosing among several by a configure key reports them all; the
   * one it runs on has selected = true). *out_devices (*out_count entries;
   * NULL when 0) is owned by the backend and valid until the next call of
   * this slot or destroy. A backend without devices of its own (a CPU
   * backend) leaves the slot NULL or reports none. */
  bp_status_t* (*get_devices)(bp_backend_t* backend, size_t* out_count,
                              const bp_device_info_t** out_devices);

  /* ---- new slots are appended here, with the minor that added them ------ */
} bp_backend_api_t;

/* The struct_size of a bp_backend_api_t as of each released API. */
#define BP_BACKEND_API_SIZE_1_0 BP_STRUCT_SIZE(bp_backend_api_t, execute_node)
#define BP_BACKEND_API_SIZE_1_1 BP_STRUCT_SIZE(bp_backend_api_t, compile_all)
#define BP_BACKEND_API_SIZE_1_2 BP_STRUCT_SIZE(bp_backend_api_t, execute_shaped)
#define BP_BACKEND_API_SIZE_1_3 BP_STRUCT_SIZE(bp_backend_api_t, get_op_schemas)
#define BP_BACKEND_API_SIZE_1_4 BP_STRUCT_SIZE(bp_backend_api_t, get_devices)
/* 1.5 added no slot to this table (only to bp_host_api_t and
 * bp_execute_args_t): a 1.5 table has 1.4's size. */
#define BP_BACKEND_API_SIZE_1_5 BP_BACKEND_API_SIZE_1_4
/* 1.6 added none either (bp_host_api_t and bp_execute_args_t again). */
#define BP_BACKEND_API_SIZE_1_6 BP_BACKEND_API_SIZE_1_4

/* True if `table` (of struct_size bytes) has a non-NULL `slot`. */
#define BP_TABLE_HAS(table, slot) \
  (BP_HAS_FIELD(bp_backend_api_t, slot, (table)->struct_size) && (table)->slot != NULL)

/* ======================================================================= */
/* Entry points of a backend shared object (ArmNN names, C linkage)         */
/* ======================================================================= */

/* Backend id, e.g. "CpuRef": [A-Za-z0-9]+, static storage. */
typedef const char* (*bp_get_backend_id_fn)(void);
/* The API version the backend was built against (BP_API_VERSION_*). */
typedef void (*bp_get_version_fn)(uint32_t* outMajor, uint32_t* outMinor);
/* The backend's bp_backend_api_t, static storage; NULL means failure. */
typedef void* (*bp_backend_factory_fn)(void);
/* Optional: 0 = cannot run on this machine; higher = preferred among files
 * providing the same id. */
typedef uint32_t (*bp_get_backend_score_fn)(void);

#define BP_ENTRY_GET_BACKEND_ID "GetBackendId"
#define BP_ENTRY_GET_VERSION "GetVersion"
#define BP_ENTRY_BACKEND_FACTORY "BackendFactory"
#define BP_ENTRY_GET_BACKEND_SCORE "GetBackendScore"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BACKPLANE_BACKEND_ABI_H_ */
