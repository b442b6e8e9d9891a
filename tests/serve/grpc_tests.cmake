# backplane serve over gRPC, driven by clients generated from or loading
# serve/proto/grpc_predict_v2.proto: Debian's python3-grpcio (stubs made at
# test time) and Node's @grpc/grpc-js, which scripts/fetch-grpc-node.sh
# installs at pinned versions into ${CMAKE_BINARY_DIR}/serve/node (a
# download, hence the `data` label on that step).
backplane_serve_pytest(serve_grpc_python test_grpc_python.py)

add_test(NAME serve_grpc_node_fetch
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/fetch-grpc-node.sh ${CMAKE_BINARY_DIR})
set_tests_properties(serve_grpc_node_fetch PROPERTIES FIXTURES_SETUP serve_grpc_node
  TIMEOUT 600)
backplane_labels(serve_grpc_node_fetch serve data)

backplane_serve_pytest(serve_grpc_node test_grpc_node.py)
set(_bp_node_modules ${CMAKE_BINARY_DIR}/serve/node/node_modules)
set_tests_properties(serve_grpc_node PROPERTIES
  FIXTURES_REQUIRED "e2e_models;serve_grpc_node"
  ENVIRONMENT "${BACKPLANE_SERVE_TEST_ENV};BACKPLANE_GRPC_NODE_MODULES=${_bp_node_modules}")
