// backend_ops.hpp — operators a backend defines (API 1.3, bp_op_schema_t):
// what the host keeps of each, and how they become schemas of the graph IR.
//
// A LoadedBackend reads its schemas once, at create, and checks them
// (check_backend_ops): a malformed one, or one that would redefine an
// operator the runtime knows, makes the backend fail to load with the
// reason. BackendRegistry turns the ops of its backends into ir::OpSchemas of
// one OpRegistry layered over OpRegistry::builtin() (registry.hpp), whose
// inference calls the backend's callback through the ABI.
#pragma once

#include "ir/op_registry.hpp"

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// The object behind bp_infer_result_t: one entry per output of the node.
struct bp_infer_result {
  std::vector<backplane::DType> dtypes;  // kUndefined until set
  std::vector<backplane::Shape> shapes;
};

namespace backplane {

class LoadedBackend;

// One operator of a backend, copied out of its bp_op_schema_t (the callback
// and its user_data stay the backend's; they live as long as its instance).
struct BackendOp {
  std::string domain, name, doc;
  int since_version = 1;
  uint32_t min_inputs = 0, max_inputs = 0, min_outputs = 0, max_outputs = 0;
  struct Attr {
    std::string name;
    bp_attr_type_t type = BP_ATTR_UNDEFINED;
    bool required = false;
  };
  std::vector<Attr> attributes;
  bp_op_infer_fn infer = nullptr;
  void* user_data = nullptr;
};

// Copies and checks what get_op_schemas returned: domain (not the default
// one), name, since_version, input/output bounds, attribute names and types,
// infer; no operator twice, none that `known` (the built-in registry) already
// defines. Errors say which entry and why.
Result<std::vector<BackendOp>> check_backend_ops(const bp_op_schema_t* schemas, size_t count,
                                                 const ir::OpRegistry& known);

// The ir::OpSchema of `op` of `backend`: its signature, attributes, and an
// infer function that calls op.infer (keeping `backend` alive).
ir::OpSchema to_ir_schema(const BackendOp& op, std::shared_ptr<const LoadedBackend> backend);

}  // namespace backplane
