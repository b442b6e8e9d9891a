// dynamic_loader.hpp — finds, checks, loads and creates dynamic backends
// (Arm NN's dynamic backend design, through Backplane's C ABI).
//
// Order of work for each directory (search-path order) and each file in it
// (name order): naming scheme -> canonical path (dangling links rejected, the
// same file reached twice loads once) -> trust (permissions, digest) ->
// optional probe in a child process -> dlopen(RTLD_LOCAL) -> entry points ->
// id -> version (before BackendFactory) -> score. Files that provide the same
// id compete: the best compatible one loads, the others are "superseded".
// Then BackendFactory, table checks and create. Any failure is reported with
// the file, the step and the reason, and that file is skipped.
#pragma once

#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace backplane {

// The utility functions (the seed's DynamicBackendUtils), public for tests.
namespace dynamic_backend_utils {

// Search directories in precedence order: options.backend_path, else
// $BACKPLANE_BACKEND_PATHS (colon-separated), else the compile-time list.
// Empty when dynamic loading is disabled. Relative or missing directories are
// reported in `reports` (used = false) and left out.
std::vector<std::string> search_paths(const RuntimeOptions& options,
                                      std::vector<BackendPathReport>* reports);

// The default list: the compile-time one (BACKPLANE_DYNAMIC_BACKEND_PATHS),
// split; when that is empty (the default), installed_backend_dir(): the
// install's backend directory relative to the program or libbackplane.so
// (a relocated prefix, the copy inside a Python package). Plus this build
// tree's backends when the program or libbackplane.so runs from it.
std::vector<std::string> compiled_in_paths();

// The canonical path of the executable or shared library holding the
// runtime (dladdr on a runtime function); "" if unknown.
std::string runtime_binary();

// The default backend directory of a relocatable install: the
// lib/backplane/backends of the prefix runtime_binary() sits in
// (<prefix>/bin/../lib/backplane/backends for a program, <prefix>/lib/
// backplane/backends for a shared library) if that directory exists, else the
// configure-time prefix's.
std::string installed_backend_dir();

// Splits "a:b::c" into {"a","b","c"}.
std::vector<std::string> split_paths(const std::string& list);

// True if `file_name` follows <vendor>_<name>_backend.so[.<version>]; fills the
// parts when given.
bool parse_file_name(const std::string& file_name, std::string* vendor = nullptr,
                     std::string* name = nullptr, std::string* version = nullptr);

// Candidate files of one directory, sorted by name, with their paths.
std::vector<std::string> list_candidates(const std::string& directory);

// A backend id is [A-Za-z0-9]+.
bool valid_backend_id(const std::string& id);

// M.m of the runtime accepts a backend built for bm.bn?
bool version_compatible(uint32_t backend_major, uint32_t backend_minor, uint32_t runtime_major,
                        uint32_t runtime_minor);

// Refuses a file or directory writable by group or others.
Status check_permissions(const std::string& path);

// Lowercase hex SHA-256 of a file's bytes.
Result<std::string> sha256_file(const std::string& path);

// Compares dotted numeric versions ("1.10" > "1.9"); "" is lowest.
int compare_versions(const std::string& a, const std::string& b);

// Loads and exercises the backend in a child process: entry points, version,
// factory, table, create, info, op schemas, then support queries on one-node
// float32 graphs (Relu, Add, Mul, Sigmoid, Identity, Abs) until the backend
// claims one, which it compiles and executes (context, execute or
// execute_shaped, or execute_node; tensors in its device memory when it has
// some), then destroy. OK, or the reason it failed: the signal that killed
// it or the timeout, with the entry point or ABI slot it was in ("probe
// crashed in slot 'execute': killed by signal 11 (...)"), or the failing
// step's status.
Status probe_in_child(const std::string& canonical_path, int timeout_ms);

}  // namespace dynamic_backend_utils

struct DynamicLoadResult {
  std::vector<std::shared_ptr<LoadedBackend>> backends;  // created, in discovery order
  std::vector<BackendFileReport> files;
  std::vector<BackendPathReport> paths;
};

// Loads every dynamic backend allowed by `options`. `taken_ids` are ids a
// dynamic backend may not take (the static backends').
DynamicLoadResult load_dynamic_backends(const RuntimeOptions& options,
                                        const std::vector<std::string>& taken_ids);

}  // namespace backplane
