// host_api.hpp — the host table (bp_host_api_t) given to every backend: status
// objects, logging, NamedDataMap and NamedBlobStore access, the byte writer,
// node reports and host memory. The objects behind its opaque handles have
// headers of their own (core/named_data_map.hpp, core/named_blob_store.hpp,
// registry/abi_status.hpp, registry/node_report.hpp, registry/byte_writer.hpp).
#pragma once

#include <backplane/backend_abi.h>

namespace backplane {

// The host table, one for the whole process (it is stateless, so any thread
// may use it). Lives until the process exits.
const bp_host_api_t* host_api();

}  // namespace backplane
