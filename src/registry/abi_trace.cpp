#include "registry/abi_trace.hpp"

#include "core/log.hpp"
#include "registry/abi_status.hpp"

#include <array>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

namespace backplane {
namespace {

// The slots traced, in table order (1.0 to 1.4).
// clang-format off
#define BP_TRACED_SLOTS(X)                                                          \
  X(create) X(destroy) X(get_info) X(configure) X(query_support) X(compile)         \
  X(compiled_destroy) X(context_create) X(context_destroy) X(execute) X(serialize)  \
  X(deserialize) X(memory_alloc) X(memory_free) X(copy_to_device)                   \
  X(copy_from_device) X(before_load_network) X(after_load_network)                 \
  X(before_unload_network) X(after_unload_network) X(memory_acquire)                \
  X(memory_release) X(execute_node) X(compile_all) X(execute_shaped)                \
  X(get_op_schemas) X(get_devices)
// clang-format on

// Tables are statically numbered so each trampoline knows its backend
// without a lookup: trampoline <K, slot> serves the table held in g_held[K].
constexpr size_t kTables = 32;

struct Held {
  const bp_backend_api_t* real = nullptr;  // null: free
  std::string id;
};

std::mutex g_mutex;  // guards acquire/release, not calls
std::array<Held, kTables> g_held;
std::array<bp_backend_api_t, kTables> g_tables;

std::string thread_tag() {
  return std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()) % 100000);
}

void log_call(size_t k, const char* slot) {
  log::write(LogLevel::kTrace,
             "abi call " + g_held[k].id + "." + slot + " (thread " + thread_tag() + ")");
}

void log_return(size_t k, const char* slot, const bp_status_t* status) {
  std::string outcome = "ok";
  if (status != nullptr)
    outcome = "status " + std::to_string(static_cast<int>(status->code)) + ": " + status->message;
  log::write(LogLevel::kTrace, "abi return " + g_held[k].id + "." + slot + ": " + outcome +
                                   " (thread " + thread_tag() + ")");
}

template <class Member>
using SlotFunction = std::remove_pointer_t<std::remove_reference_t<Member>>;

template <size_t K, auto M, const char* Name, class F>
struct Trampoline;

template <size_t K, auto M, const char* Name, class R, class... A>
struct Trampoline<K, M, Name, R(A...)> {
  static R call(A... args) {
    log_call(K, Name);
    if constexpr (std::is_void_v<R>) {
      (g_held[K].real->*M)(args...);
      log_return(K, Name, nullptr);
    } else {
      R r = (g_held[K].real->*M)(args...);
      log_return(K, Name, r);
      return r;
    }
  }
};

#define BP_SLOT_NAME(slot) constexpr char kName_##slot[] = #slot;
BP_TRACED_SLOTS(BP_SLOT_NAME)
#undef BP_SLOT_NAME

// Fills g_tables[K] from `real`: its bytes, then a trampoline in every slot
// the backend filled.
template <size_t K>
void fill(const bp_backend_api_t* real) {
  bp_backend_api_t& t = g_tables[K];
  std::memset(&t, 0, sizeof t);
  std::memcpy(&t, real, std::min(real->struct_size, sizeof t));
#define BP_TRACE_SLOT(slot)                                        \
  if (BP_TABLE_HAS(real, slot))                                    \
    t.slot = &Trampoline<K, &bp_backend_api_t::slot, kName_##slot, \
                         SlotFunction<decltype(std::declval<bp_backend_api_t>().slot)>>::call;
  BP_TRACED_SLOTS(BP_TRACE_SLOT)
#undef BP_TRACE_SLOT
}

template <size_t... K>
void fill_table(size_t k, const bp_backend_api_t* real, std::index_sequence<K...>) {
  ((k == K ? fill<K>(real) : void()), ...);
}

}  // namespace

const bp_backend_api_t* acquire_traced_table(const bp_backend_api_t* api, const std::string& id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (size_t k = 0; k < kTables; ++k) {
    if (g_held[k].real != nullptr) continue;
    g_held[k].real = api;
    g_held[k].id = id;
    fill_table(k, api, std::make_index_sequence<kTables>());
    return &g_tables[k];
  }
  log::debug("backend '" + id + "': every traced table is in use, its ABI calls are not traced");
  return api;
}

void release_traced_table(const bp_backend_api_t* table) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (size_t k = 0; k < kTables; ++k)
    if (table == &g_tables[k]) {
      g_held[k].real = nullptr;
      g_held[k].id.clear();
    }
}

}  // namespace backplane
