/* abi_layout_test.c — freezes the released layouts of backend_abi.h (API 1.0 to 1.5)
 * and the numbers of its status codes.
 *
 * Compiled as C99 with only the ABI header: proves the header is standalone C
 * and that no released struct or table changed layout. A change here is an
 * ABI break: bump BP_API_VERSION_MAJOR instead of editing these numbers
 * (x86-64 / aarch64 LP64 values). */
#include <backplane/backend_abi.h>

#include <stdio.h>

#define BP_FREEZE(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), #type "." #field " moved")

BP_FREEZE(bp_backend_api_t, struct_size, 0);
BP_FREEZE(bp_backend_api_t, api_major, 8);
BP_FREEZE(bp_backend_api_t, api_minor, 12);
BP_FREEZE(bp_backend_api_t, create, 16);
BP_FREEZE(bp_backend_api_t, destroy, 24);
BP_FREEZE(bp_backend_api_t, get_info, 32);
BP_FREEZE(bp_backend_api_t, configure, 40);
BP_FREEZE(bp_backend_api_t, query_support, 48);
BP_FREEZE(bp_backend_api_t, compile, 56);
BP_FREEZE(bp_backend_api_t, compiled_destroy, 64);
BP_FREEZE(bp_backend_api_t, context_create, 72);
BP_FREEZE(bp_backend_api_t, context_destroy, 80);
BP_FREEZE(bp_backend_api_t, execute, 88);
BP_FREEZE(bp_backend_api_t, serialize, 96);
BP_FREEZE(bp_backend_api_t, deserialize, 104);
BP_FREEZE(bp_backend_api_t, memory_alloc, 112);
BP_FREEZE(bp_backend_api_t, memory_free, 120);
BP_FREEZE(bp_backend_api_t, copy_to_device, 128);
BP_FREEZE(bp_backend_api_t, copy_from_device, 136);
BP_FREEZE(bp_backend_api_t, before_load_network, 144);
BP_FREEZE(bp_backend_api_t, after_load_network, 152);
BP_FREEZE(bp_backend_api_t, before_unload_network, 160);
BP_FREEZE(bp_backend_api_t, after_unload_network, 168);
BP_FREEZE(bp_backend_api_t, memory_acquire, 176);
BP_FREEZE(bp_backend_api_t, memory_release, 184);
BP_FREEZE(bp_backend_api_t, execute_node, 192);
BP_FREEZE(bp_host_api_t, struct_size, 0);
BP_FREEZE(bp_host_api_t, api_major, 8);
BP_FREEZE(bp_host_api_t, api_minor, 12);
BP_FREEZE(bp_host_api_t, status_create, 16);
BP_FREEZE(bp_host_api_t, status_code, 24);
BP_FREEZE(bp_host_api_t, status_message, 32);
BP_FREEZE(bp_host_api_t, status_release, 40);
BP_FREEZE(bp_host_api_t, log, 48);
BP_FREEZE(bp_host_api_t, data_map_get, 56);
BP_FREEZE(bp_host_api_t, buffer_free, 64);
BP_FREEZE(bp_host_api_t, data_map_num_keys, 72);
BP_FREEZE(bp_host_api_t, data_map_key_at, 80);
BP_FREEZE(bp_host_api_t, blob_store_add, 88);
BP_FREEZE(bp_host_api_t, writer_append, 96);
BP_FREEZE(bp_host_api_t, report_node, 104);
BP_FREEZE(bp_host_api_t, alloc, 112);
BP_FREEZE(bp_host_api_t, free, 120);
BP_FREEZE(bp_tensor_t, struct_size, 0);
BP_FREEZE(bp_tensor_t, dtype, 8);
BP_FREEZE(bp_tensor_t, rank, 16);
BP_FREEZE(bp_tensor_t, shape, 24);
BP_FREEZE(bp_tensor_t, data, 32);
BP_FREEZE(bp_tensor_t, size_bytes, 40);
BP_FREEZE(bp_tensor_t, device, 48);
BP_FREEZE(bp_attr_tensor_t, struct_size, 0);
BP_FREEZE(bp_attr_tensor_t, dtype, 8);
BP_FREEZE(bp_attr_tensor_t, rank, 16);
BP_FREEZE(bp_attr_tensor_t, shape, 24);
BP_FREEZE(bp_attr_tensor_t, data, 32);
BP_FREEZE(bp_attr_tensor_t, size_bytes, 40);
BP_FREEZE(bp_attribute_t, struct_size, 0);
BP_FREEZE(bp_attribute_t, name, 8);
BP_FREEZE(bp_attribute_t, type, 16);
BP_FREEZE(bp_attribute_t, i, 24);
BP_FREEZE(bp_attribute_t, f, 32);
BP_FREEZE(bp_attribute_t, s, 40);
BP_FREEZE(bp_attribute_t, count, 48);
BP_FREEZE(bp_attribute_t, ints, 56);
BP_FREEZE(bp_attribute_t, floats, 64);
BP_FREEZE(bp_attribute_t, strings, 72);
BP_FREEZE(bp_attribute_t, t, 80);
BP_FREEZE(bp_value_t, struct_size, 0);
BP_FREEZE(bp_value_t, name, 8);
BP_FREEZE(bp_value_t, dtype, 16);
BP_FREEZE(bp_value_t, rank, 24);
BP_FREEZE(bp_value_t, shape, 32);
BP_FREEZE(bp_value_t, flags, 40);
BP_FREEZE(bp_value_t, data_key, 48);
BP_FREEZE(bp_node_t, struct_size, 0);
BP_FREEZE(bp_node_t, name, 8);
BP_FREEZE(bp_node_t, op_type, 16);
BP_FREEZE(bp_node_t, domain, 24);
BP_FREEZE(bp_node_t, opset, 32);
BP_FREEZE(bp_node_t, num_inputs, 40);
BP_FREEZE(bp_node_t, inputs, 48);
BP_FREEZE(bp_node_t, num_outputs, 56);
BP_FREEZE(bp_node_t, outputs, 64);
BP_FREEZE(bp_node_t, num_attributes, 72);
BP_FREEZE(bp_node_t, attributes, 80);
BP_FREEZE(bp_graph_view_t, struct_size, 0);
BP_FREEZE(bp_graph_view_t, name, 8);
BP_FREEZE(bp_graph_view_t, num_values, 16);
BP_FREEZE(bp_graph_view_t, values, 24);
BP_FREEZE(bp_graph_view_t, num_nodes, 32);
BP_FREEZE(bp_graph_view_t, nodes, 40);
BP_FREEZE(bp_graph_view_t, num_inputs, 48);
BP_FREEZE(bp_graph_view_t, inputs, 56);
BP_FREEZE(bp_graph_view_t, num_outputs, 64);
BP_FREEZE(bp_graph_view_t, outputs, 72);
BP_FREEZE(bp_graph_view_t, weights, 80);
BP_FREEZE(bp_buffer_t, struct_size, 0);
BP_FREEZE(bp_buffer_t, data, 8);
BP_FREEZE(bp_buffer_t, size, 16);
BP_FREEZE(bp_buffer_t, host_private, 24);
BP_FREEZE(bp_backend_info_t, struct_size, 0);
BP_FREEZE(bp_backend_info_t, vendor, 8);
BP_FREEZE(bp_backend_info_t, description, 16);
BP_FREEZE(bp_backend_info_t, device_count, 24);
BP_FREEZE(bp_backend_info_t, flags, 28);
BP_FREEZE(bp_compile_options_t, struct_size, 0);
BP_FREEZE(bp_compile_options_t, num_threads, 8);
BP_FREEZE(bp_compile_options_t, ahead_of_time, 12);
BP_FREEZE(bp_compile_options_t, blob_store, 16);

/* Status codes: numbers never change meaning; new codes are appended (they
 * need no minor bump, see backend_abi.h). The enum stays 32 bits wide. */
#define BP_FREEZE_CODE(code, value) _Static_assert((code) == (value), #code " renumbered")
BP_FREEZE_CODE(BP_STATUS_OK, 0);
BP_FREEZE_CODE(BP_STATUS_INVALID_ARGUMENT, 1);
BP_FREEZE_CODE(BP_STATUS_UNSUPPORTED, 2);
BP_FREEZE_CODE(BP_STATUS_UNIMPLEMENTED, 3);
BP_FREEZE_CODE(BP_STATUS_OUT_OF_MEMORY, 4);
BP_FREEZE_CODE(BP_STATUS_NOT_FOUND, 5);
BP_FREEZE_CODE(BP_STATUS_CORRUPT_DATA, 6);
BP_FREEZE_CODE(BP_STATUS_VERSION_MISMATCH, 7);
BP_FREEZE_CODE(BP_STATUS_DEVICE_ERROR, 8);
BP_FREEZE_CODE(BP_STATUS_INTERNAL, 9);
BP_FREEZE_CODE(BP_STATUS_IO_ERROR, 10);
BP_FREEZE_CODE(BP_STATUS_BACKEND_ERROR, 11);
BP_FREEZE_CODE(BP_STATUS_FORCE_INT32_, 0x7FFFFFFF);
_Static_assert(sizeof(bp_status_code_t) == 4, "bp_status_code_t changed size");

_Static_assert(BP_API_VERSION_MAJOR == 1, "major version changed: update the frozen layouts");
BP_FREEZE(bp_backend_api_t, compile_all, 200);
_Static_assert(BP_BACKEND_API_SIZE_1_0 == 200, "API 1.0 table size changed");
_Static_assert(BP_BACKEND_API_SIZE_1_1 == 208, "API 1.1 table size changed");
/* 1.2 */
BP_FREEZE(bp_backend_api_t, execute_shaped, 208);
_Static_assert(BP_BACKEND_API_SIZE_1_2 == 216, "API 1.2 table size changed");
BP_FREEZE(bp_host_api_t, output_allocate, 128);
_Static_assert(BP_HOST_API_SIZE_1_0 == 128, "API 1.0 host table size changed");
_Static_assert(BP_HOST_API_SIZE_1_2 == 136, "API 1.2 host table size changed");
BP_FREEZE(bp_compile_options_t, shape_polymorphic, 24);
BP_FREEZE(bp_shape_t, rank, 0);
BP_FREEZE(bp_shape_t, dims, 8);
_Static_assert(sizeof(bp_shape_t) == 16, "bp_shape_t is never extended");
BP_FREEZE(bp_execute_args_t, struct_size, 0);
BP_FREEZE(bp_execute_args_t, num_inputs, 8);
BP_FREEZE(bp_execute_args_t, inputs, 16);
BP_FREEZE(bp_execute_args_t, num_outputs, 24);
BP_FREEZE(bp_execute_args_t, outputs, 32);
BP_FREEZE(bp_execute_args_t, num_values, 40);
BP_FREEZE(bp_execute_args_t, value_shapes, 48);
BP_FREEZE(bp_execute_args_t, sink, 56);
_Static_assert(BP_BACKEND_FLAG_SHAPE_POLYMORPHIC == 16u, "flag renumbered");
/* 1.3: backend-defined operators, and the dtypes added to bp_dtype_t */
BP_FREEZE(bp_backend_api_t, get_op_schemas, 216);
_Static_assert(BP_BACKEND_API_SIZE_1_3 == 224, "API 1.3 table size changed");
BP_FREEZE(bp_host_api_t, infer_set_output, 136);
_Static_assert(BP_HOST_API_SIZE_1_3 == 144, "API 1.3 host table size changed");
/* 1.4: the devices a backend found (get_devices, bp_device_info_t) */
BP_FREEZE(bp_backend_api_t, get_devices, 224);
_Static_assert(BP_BACKEND_API_SIZE_1_4 == 232, "API 1.4 table size changed");
BP_FREEZE(bp_device_info_t, struct_size, 0);
BP_FREEZE(bp_device_info_t, name, 8);
BP_FREEZE(bp_device_info_t, vendor, 16);
BP_FREEZE(bp_device_info_t, driver_version, 24);
BP_FREEZE(bp_device_info_t, kind, 32);
BP_FREEZE(bp_device_info_t, memory_bytes, 40);
BP_FREEZE(bp_device_info_t, compute_units, 48);
BP_FREEZE(bp_device_info_t, selected, 52);
BP_FREEZE(bp_op_attr_t, struct_size, 0);
BP_FREEZE(bp_op_attr_t, name, 8);
BP_FREEZE(bp_op_attr_t, type, 16);
BP_FREEZE(bp_op_attr_t, required, 20);
BP_FREEZE(bp_infer_args_t, struct_size, 0);
BP_FREEZE(bp_infer_args_t, node, 8);
BP_FREEZE(bp_infer_args_t, num_inputs, 16);
BP_FREEZE(bp_infer_args_t, input_dtypes, 24);
BP_FREEZE(bp_infer_args_t, input_shapes, 32);
BP_FREEZE(bp_infer_args_t, input_constants, 40);
BP_FREEZE(bp_infer_args_t, num_outputs, 48);
BP_FREEZE(bp_infer_args_t, result, 56);
BP_FREEZE(bp_op_schema_t, struct_size, 0);
BP_FREEZE(bp_op_schema_t, domain, 8);
BP_FREEZE(bp_op_schema_t, name, 16);
BP_FREEZE(bp_op_schema_t, since_version, 24);
BP_FREEZE(bp_op_schema_t, min_inputs, 28);
BP_FREEZE(bp_op_schema_t, max_inputs, 32);
BP_FREEZE(bp_op_schema_t, min_outputs, 36);
BP_FREEZE(bp_op_schema_t, max_outputs, 40);
BP_FREEZE(bp_op_schema_t, num_attributes, 48);
BP_FREEZE(bp_op_schema_t, attributes, 56);
BP_FREEZE(bp_op_schema_t, infer, 64);
BP_FREEZE(bp_op_schema_t, user_data, 72);
BP_FREEZE(bp_op_schema_t, doc, 80);
_Static_assert(BP_OP_UNBOUNDED == 0xFFFFFFFFu, "BP_OP_UNBOUNDED changed");
/* 1.5: the host's thread pool (thread_pool_size, parallel_for) and the
 * execute flags (a partition edge follows) */
BP_FREEZE(bp_host_api_t, thread_pool_size, 144);
BP_FREEZE(bp_host_api_t, parallel_for, 152);
_Static_assert(BP_HOST_API_SIZE_1_5 == 160, "API 1.5 host table size changed");
BP_FREEZE(bp_execute_args_t, thread_pool, 64);
BP_FREEZE(bp_execute_args_t, flags, 72);
_Static_assert(BP_EXECUTE_ARGS_SIZE_1_2 == 64, "API 1.2 execute args size changed");
_Static_assert(BP_EXECUTE_ARGS_SIZE_1_5 == 76, "API 1.5 execute args size changed");
_Static_assert(BP_EXECUTE_EDGE_FOLLOWS == 1u, "flag renumbered");
_Static_assert(BP_BACKEND_API_SIZE_1_5 == BP_BACKEND_API_SIZE_1_4, "1.5 added no backend slot");
/* 1.6: the profiler (clock_ns, profile_node, execute args' profile) */
BP_FREEZE(bp_host_api_t, clock_ns, 160);
BP_FREEZE(bp_host_api_t, profile_node, 168);
_Static_assert(BP_HOST_API_SIZE_1_6 == 176, "API 1.6 host table size changed");
BP_FREEZE(bp_execute_args_t, profile, 80);
_Static_assert(BP_EXECUTE_ARGS_SIZE_1_6 == 88, "API 1.6 execute args size changed");
_Static_assert(BP_PROFILE_NO_NODE == (size_t)-1, "BP_PROFILE_NO_NODE changed");
_Static_assert(BP_BACKEND_API_SIZE_1_6 == BP_BACKEND_API_SIZE_1_4, "1.6 added no backend slot");
_Static_assert(BP_DTYPE_UINT16 == 4 && BP_DTYPE_INT16 == 5 && BP_DTYPE_FLOAT64 == 11 &&
                   BP_DTYPE_UINT32 == 12 && BP_DTYPE_UINT64 == 13 && BP_DTYPE_BFLOAT16 == 16,
               "dtype renumbered");

int main(void) {
  /* The helpers agree with the frozen sizes at run time too. */
  bp_backend_api_t t = {0};
  t.struct_size = BP_BACKEND_API_SIZE_1_0;
  if (!BP_HAS_FIELD(bp_backend_api_t, execute_node, t.struct_size)) return 1;
  if (BP_TABLE_HAS(&t, execute_node)) return 1; /* NULL slot */
  /* A 1.0 table has no compile_all: the host must not read past its end. */
  t.compile_all =
      (bp_status_t * (*)(bp_backend_t*, size_t, const bp_graph_view_t* const*,
                         const bp_compile_options_t*, bp_node_report_t* const*, bp_compiled_t**))1;
  if (BP_TABLE_HAS(&t, compile_all)) return 1;
  t.struct_size = BP_BACKEND_API_SIZE_1_1;
  if (!BP_TABLE_HAS(&t, compile_all)) return 1;
  /* A 1.1 table has no execute_shaped. */
  t.execute_shaped = (bp_status_t * (*)(bp_exec_context_t*, const bp_execute_args_t*))1;
  if (BP_TABLE_HAS(&t, execute_shaped)) return 1;
  t.struct_size = BP_BACKEND_API_SIZE_1_2;
  if (!BP_TABLE_HAS(&t, execute_shaped)) return 1;
  /* A 1.2 table has no get_op_schemas. */
  t.get_op_schemas = (bp_status_t * (*)(bp_backend_t*, size_t*, const bp_op_schema_t**))1;
  if (BP_TABLE_HAS(&t, get_op_schemas)) return 1;
  t.struct_size = BP_BACKEND_API_SIZE_1_3;
  if (!BP_TABLE_HAS(&t, get_op_schemas)) return 1;
  /* A 1.3 host table has no parallel_for. */
  if (BP_HAS_FIELD(bp_host_api_t, parallel_for, BP_HOST_API_SIZE_1_3)) return 1;
  if (!BP_HAS_FIELD(bp_host_api_t, parallel_for, BP_HOST_API_SIZE_1_5)) return 1;
  /* 1.2 execute args have no thread pool. */
  if (BP_HAS_FIELD(bp_execute_args_t, thread_pool, BP_EXECUTE_ARGS_SIZE_1_2)) return 1;
  puts("abi layout: 1 passed, 0 failed");
  return 0;
}
