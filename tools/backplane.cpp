// backplane — the command line (see docs and DESIGN.md, "The command line").
// Exit status: 0 success, 1 failure ("error: ..." on stderr), 2 usage error.
#include "cmd_conformance.hpp"
#include "cmd_ops.hpp"
#include "cmd_validate.hpp"
#include "npy.hpp"

#include "core/atomic_file.hpp"

#include <backplane/runtime.hpp>
#include <backplane/validate.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;
using backplane::DType;
using backplane::Result;
using backplane::Status;
using backplane::Tensor;
using json = nlohmann::json;

namespace {

struct GlobalOptions {
  std::string backend_path;
  bool no_dynamic = false;
  bool probe = false;
  bool allow_insecure = false;
  std::vector<std::string> disabled_static;
  std::vector<std::string> backend_config;  // BACKEND.KEY=VALUE
  std::string log_level = "warn";
};

// A CLI11 check that an integer option lies in [lo, hi], with a plain message.
CLI::Validator in_range(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long v = 0;
        size_t used = 0;
        try {
          v = std::stoll(text, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not an integer";
        if (v < lo || v > hi)
          return text + " is out of range: " + std::to_string(lo) + " to " + std::to_string(hi);
        return "";
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

int fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 1;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

Result<backplane::RuntimeOptions> runtime_options(const GlobalOptions& g, int threads) {
  backplane::RuntimeOptions o;
  // The runtime takes absolute directories only; on the command line a
  // relative one means "relative to here".
  if (!g.backend_path.empty())
    o.backend_path = fs::absolute(g.backend_path).lexically_normal().string();
  o.dynamic_backends = !g.no_dynamic;
  o.probe_backends = g.probe;
  o.allow_insecure_backend_paths = g.allow_insecure;
  o.disabled_static_backends = g.disabled_static;
  o.num_threads = threads;
  for (const std::string& setting : g.backend_config) {
    const size_t dot = setting.find('.'), eq = setting.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot == 0 || eq < dot + 2)
      return backplane::invalid_argument("--backend-config '" + setting +
                                         "' is not BACKEND.KEY=VALUE");
    o.backend_config[setting.substr(0, dot)][setting.substr(dot + 1, eq - dot - 1)] =
        setting.substr(eq + 1);
  }
  static const std::map<std::string, backplane::LogLevel> levels = {
      {"trace", backplane::LogLevel::kTrace}, {"debug", backplane::LogLevel::kDebug},
      {"info", backplane::LogLevel::kInfo},   {"warn", backplane::LogLevel::kWarn},
      {"error", backplane::LogLevel::kError}, {"off", backplane::LogLevel::kOff}};
  auto it = levels.find(g.log_level);
  if (it == levels.end())
    return backplane::invalid_argument("unknown log level '" + g.log_level + "'");
  o.log_level = it->second;
  return o;
}

std::string safe_file_name(std::string name) {
  for (char& c : name)
    if (c == '/' || c == '\\' || c == ':' || c == '\0') c = '_';
  if (name.empty() || name == "." || name == "..") name = "output";
  return name;
}

// A short text summary of an output for humans: shape, and for a vector of
// class scores the top entries.
std::string summarize(const Tensor& t) {
  std::ostringstream os;
  os << backplane::dtype_name(t.dtype()) << backplane::shape_to_string(t.shape());
  if (t.dtype() == DType::kFloat32 && t.numel() > 0) {
    const float* p = t.data_as<float>();
    int64_t n = t.numel();
    double mn = p[0], mx = p[0], sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      mn = std::min<double>(mn, p[i]);
      mx = std::max<double>(mx, p[i]);
      sum += p[i];
    }
    os << " min " << mn << " max " << mx << " mean " << sum / static_cast<double>(n);
    int64_t last = t.shape().empty() ? 1 : t.shape().back();
    if (n == last && n > 1) {  // one row of scores
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
      size_t k = std::min<size_t>(5, idx.size());
      std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(),
                        [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      os << "\n    top-" << k << ":";
      for (size_t i = 0; i < k; ++i) os << " [" << idx[i] << "] " << p[idx[i]];
    }
  }
  return os.str();
}

int cmd_backends(const GlobalOptions& g, bool as_json) {
  auto opts = runtime_options(g, 0);
  if (!opts.ok()) return fail(opts.status().message());
  auto rt = backplane::Runtime::create(*opts);
  if (!rt.ok()) return fail(rt.status().message());
  auto list = (*rt)->backends();
  auto files = (*rt)->backend_files();
  auto paths = (*rt)->backend_paths();
  if (as_json) {
    json j = json::object();
    j["backends"] = json::array();
    for (const auto& b : list) {
      json devices = json::array();
      for (const auto& d : b.devices)
        devices.push_back({{"name", d.name},
                           {"vendor", d.vendor},
                           {"driver_version", d.driver_version},
                           {"kind", d.kind},
                           {"memory_bytes", d.memory_bytes},
                           {"compute_units", d.compute_units},
                           {"selected", d.selected}});
      j["backends"].push_back(
          {{"id", b.id},
           {"vendor", b.vendor},
           {"description", b.description},
           {"version", std::to_string(b.api_major) + "." + std::to_string(b.api_minor)},
           {"source", b.source == "static" ? "static" : "dynamic"},
           {"path", b.source == "static" ? "" : b.source},
           {"status", "registered"},
           {"devices", devices}});
    }
    j["files"] = json::array();
    for (const auto& f : files)
      j["files"].push_back({{"path", f.path},
                            {"canonical_path", f.canonical_path},
                            {"id", f.id},
                            {"file_version", f.file_version},
                            {"version", f.api_version},
                            {"score", f.score},
                            {"status", backplane::fate_name(f.fate)},
                            {"step", f.step},
                            {"reason", f.reason}});
    j["paths"] = json::array();
    for (const auto& p : paths)
      j["paths"].push_back({{"path", p.path}, {"used", p.used}, {"reason", p.reason}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("Registered backends:\n");
  for (const auto& b : list) {
    std::printf("  %-12s api %u.%u  %-10s %-8s %s\n", b.id.c_str(), b.api_major, b.api_minor,
                b.vendor.c_str(), b.source == "static" ? "static" : b.source.c_str(),
                b.description.c_str());
    for (size_t i = 0; i < b.devices.size(); ++i) {
      const auto& d = b.devices[i];
      std::printf("    %s device %zu: %s (%s, %s, %.1f GiB, %u compute units, driver %s)\n",
                  d.selected ? "*" : " ", i, d.name.c_str(), d.vendor.c_str(), d.kind.c_str(),
                  double(d.memory_bytes) / double(1ull << 30), d.compute_units,
                  d.driver_version.c_str());
    }
  }
  if (!paths.empty()) {
    std::printf("Search paths:\n");
    for (const auto& p : paths)
      std::printf("  %s%s%s\n", p.path.c_str(),
                  p.used ? "" : "  (skipped: ", p.used ? "" : (p.reason + ")").c_str());
  }
  if (!files.empty()) {
    std::printf("Backend files:\n");
    for (const auto& f : files) {
      std::printf("  %-10s %s", backplane::fate_name(f.fate), f.path.c_str());
      if (!f.id.empty()) std::printf("  [%s, api %s]", f.id.c_str(), f.api_version.c_str());
      if (!f.reason.empty()) std::printf("\n             %s: %s", f.step.c_str(), f.reason.c_str());
      std::printf("\n");
    }
  }
  return 0;
}

struct PartitionArgs {
  std::string model;
  std::string backends;
  std::vector<std::string> overrides;
  std::vector<std::string> shapes;
  bool json = false;
  std::string dot;
  bool allow_fallback = false;
};

// Fills overrides from NODE=BACKEND strings; "" on success, else the message.
std::string parse_overrides(const std::vector<std::string>& items,
                            backplane::PlacementOptions* placement) {
  for (const std::string& o : items) {
    size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == o.size())
      return "--override expects NODE=BACKEND, got '" + o + "'";
    placement->overrides[o.substr(0, eq)] = o.substr(eq + 1);
  }
  return "";
}

// One --shape NAME=DIMS: per dim its smallest and largest size (the same
// unless the dim is a range LO..HI).
struct ShapeItem {
  std::string text, name;
  backplane::Shape min, max;
  bool ranged() const { return min != max; }
};

// Parses NAME=DIMS (DIMS: 1x128, or 1,128; "" for a scalar; with `ranges`,
// a dim may be LO..HI); "" on success, else the message.
std::string parse_shape_item(const std::string& item, bool ranges, ShapeItem* out) {
  size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    return "--shape expects NAME=DIMS (e.g. input=1x128), got '" + item + "'";
  auto number = [](const std::string& d, int64_t* v) {
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), *v);
    return !d.empty() && ec == std::errc() && end == d.data() + d.size() && *v >= 0;
  };
  out->text = item;
  out->name = item.substr(0, eq);
  std::string dims = item.substr(eq + 1);
  for (std::string& d : split(dims, dims.find(',') != std::string::npos ? ',' : 'x')) {
    int64_t lo = -1, hi = -1;
    const size_t dots = d.find("..");
    if (dots == std::string::npos) {
      if (!number(d, &lo)) return "--shape " + item + ": '" + d + "' is not a non-negative dim";
      hi = lo;
    } else if (!ranges) {
      return "--shape " + item + ": a range of sizes ('" + d + "') is for compile only";
    } else if (!number(d.substr(0, dots), &lo) || !number(d.substr(dots + 2), &hi) || lo > hi) {
      return "--shape " + item + ": '" + d + "' is not a range LO..HI of sizes with LO <= HI";
    }
    out->min.push_back(lo);
    out->max.push_back(hi);
  }
  return "";
}

// Fills input_shapes from NAME=DIMS strings (the last one given for a name
// counts); "" on success, else the message.
std::string parse_shapes(const std::vector<std::string>& items,
                         backplane::PlacementOptions* placement) {
  for (const std::string& item : items) {
    ShapeItem parsed;
    if (std::string e = parse_shape_item(item, false, &parsed); !e.empty()) return e;
    placement->input_shapes[parsed.name] = parsed.min;
  }
  return "";
}

// compile's --shape items: the signatures to compile. A name given again
// starts a new specialisation; a name given once counts for all of them; a
// set with ranges is compiled at both ends (every ranged dim at its LO, then
// at its HI). One set without ranges is CompileOptions::input_shapes, as
// before; several go to CompileOptions::shapes.
std::string parse_compile_shapes(const std::vector<std::string>& items,
                                 backplane::CompileOptions* options) {
  std::vector<std::map<std::string, ShapeItem>> sets(1);
  std::map<std::string, std::vector<ShapeItem>> given;  // by name, in order
  for (const std::string& item : items) {
    ShapeItem parsed;
    if (std::string e = parse_shape_item(item, true, &parsed); !e.empty()) return e;
    if (sets.back().count(parsed.name)) sets.emplace_back();
    sets.back()[parsed.name] = parsed;
    given[parsed.name].push_back(parsed);
  }
  for (const auto& [name, all] : given)
    for (auto& set : sets) {
      if (set.count(name)) continue;
      if (all.size() > 1)
        return "--shape: '" + name + "' is given " + std::to_string(all.size()) +
               " times but not in the specialisation of --shape " + set.begin()->second.text +
               "; give it in every specialisation, or once for all of them";
      set[name] = all.front();
    }
  std::vector<std::map<std::string, backplane::Shape>> signatures;
  bool ranged = false;
  for (const auto& set : sets) {
    std::map<std::string, backplane::Shape> lo, hi;
    for (const auto& [name, item] : set) {
      lo[name] = item.min;
      hi[name] = item.max;
      ranged |= item.ranged();
    }
    signatures.push_back(lo);
    if (hi != lo) signatures.push_back(hi);
  }
  if (signatures.size() == 1 && !ranged) options->input_shapes = signatures.front();
  else options->shapes = std::move(signatures);
  return "";
}

// "input 'x' dims [batch,seq]" for each input with a dim no run has fixed.
std::string open_inputs(const backplane::Model& model) {
  std::string out;
  for (const auto& info : model.inputs()) {
    if (std::none_of(info.shape.begin(), info.shape.end(), [](int64_t d) { return d < 0; }))
      continue;
    std::string dims;
    for (size_t d = 0; d < info.shape.size(); ++d)
      dims += (d ? "," : "") + (d < info.dim_names.size() && !info.dim_names[d].empty()
                                    ? info.dim_names[d]
                                : info.shape[d] < 0 ? std::string("?")
                                                    : std::to_string(info.shape[d]));
    out += (out.empty() ? "" : ", ") + ("'" + info.name + "' [" + dims + "]");
  }
  return out;
}

int cmd_partition(const GlobalOptions& g, const PartitionArgs& a) {
  auto opts = runtime_options(g, 0);
  if (!opts.ok()) return fail(opts.status().message());
  backplane::ModelOptions mo;
  mo.backends = split(a.backends, ',');
  mo.allow_fallback = a.allow_fallback;
  if (std::string e = parse_overrides(a.overrides, &mo); !e.empty()) return fail(e);
  if (std::string e = parse_shapes(a.shapes, &mo); !e.empty()) return fail(e);
  auto rt = backplane::Runtime::create(*opts);
  if (!rt.ok()) return fail(rt.status().message());
  auto model = (*rt)->load_model(a.model, mo);
  if (!model.ok()) return fail(model.status().message());
  if (!(*model)->runs_in_stages() && (*model)->partitions().empty() &&
      !open_inputs(**model).empty())
    return fail(a.model + ": the plan depends on the input shapes, and inputs " +
                open_inputs(**model) + " are open; give them with --shape NAME=DIMS");
  if (!a.dot.empty()) {
    Status st = backplane::write_file_atomically(
        a.dot, (*model)->describe_plan(backplane::PlanFormat::kDot));
    if (!st.ok()) return fail(st.message());
  }
  std::cout << (*model)->describe_plan(a.json ? backplane::PlanFormat::kJson
                                              : backplane::PlanFormat::kText)
            << (a.json ? "\n" : "");
  return 0;
}

struct CompileArgs {
  std::vector<std::string> models;
  std::vector<std::string> methods;  // NAME=FILE
  std::string output;
  std::string backends;
  std::vector<std::string> overrides;
  std::vector<std::string> shapes;
  std::string external_data;
  bool allow_fallback = false;
  bool no_shape_polymorphic = false;
  bool json = false;
  int threads = 0;
};

int cmd_compile(const GlobalOptions& g, const CompileArgs& a) {
  auto opts = runtime_options(g, a.threads);
  if (!opts.ok()) return fail(opts.status().message());
  std::vector<std::pair<std::string, std::string>> methods;
  for (const std::string& m : a.models) methods.emplace_back(fs::path(m).stem().string(), m);
  for (const std::string& m : a.methods) {
    size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
      return fail("--method expects NAME=FILE, got '" + m + "'");
    methods.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }
  if (methods.empty()) return fail("no model to compile");
  backplane::CompileOptions co;
  co.backends = split(a.backends, ',');
  co.allow_fallback = a.allow_fallback;
  co.external_data = a.external_data;
  co.shape_polymorphic = !a.no_shape_polymorphic;
  if (std::string e = parse_overrides(a.overrides, &co); !e.empty()) return fail(e);
  if (std::string e = parse_compile_shapes(a.shapes, &co); !e.empty()) return fail(e);
  auto rt = backplane::Runtime::create(*opts);
  if (!rt.ok()) return fail(rt.status().message());
  auto t0 = std::chrono::steady_clock::now();
  auto report = (*rt)->compile(methods, a.output, co);
  if (!report.ok()) return fail(report.status().message());
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) {
    json j = {{"output", a.output},
              {"methods", report->methods},
              {"specializations", report->specializations},
              {"partitions", report->partitions},
              {"payload_bytes", report->payload_bytes},
              {"named_data_keys", report->named_data_keys},
              {"named_data_requested_bytes", report->requested_bytes},
              {"named_data_stored_bytes", report->stored_bytes},
              {"file_bytes", report->file_bytes},
              {"external_data", a.external_data},
              {"external_bytes", report->external_bytes},
              {"compile_ms", ms}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("wrote %s: %zu method(s), %zu specialisation(s), %zu partition(s), %zu bytes",
              a.output.c_str(), report->methods.size(), report->specializations, report->partitions,
              report->file_bytes);
  if (!a.external_data.empty())
    std::printf(" + %s (%zu bytes)", a.external_data.c_str(), report->external_bytes);
  std::printf("\nnamed data: %zu keys, %zu bytes stored of %zu requested; compiled in %.1f ms\n",
              report->named_data_keys, report->stored_bytes, report->requested_bytes, ms);
  return 0;
}

int cmd_inspect(const std::string& file, const std::vector<std::string>& external, bool as_json) {
  auto text = backplane::inspect_artifact(file, as_json, external);
  if (!text.ok()) return fail(text.status().message());
  std::cout << *text << (as_json ? "\n" : "");
  return 0;
}

struct RunArgs {
  std::string model;
  std::string backends;
  std::vector<std::string> overrides;
  std::vector<std::string> shapes;
  std::vector<std::string> inputs;
  std::string output_dir;
  int runs = 1;
  int warmup = 0;
  int threads = 0;
  bool json = false;
  bool allow_fallback = false;
  std::string method;
  std::vector<std::string> external_data;
  bool lazy_checksums = false;
  std::string profile;
};

json profile_json(const backplane::ProfileSummary& p) {
  auto rows = [](const std::vector<backplane::ProfileSummary::Row>& rs) {
    json out = json::array();
    for (const auto& r : rs)
      out.push_back({{"name", r.name}, {"ms", r.ms}, {"share", r.share}, {"count", r.count}});
    return out;
  };
  return {{"trace", p.path},
          {"runs", p.runs},
          {"run_ms", p.run_ms},
          {"by_backend", rows(p.by_backend)},
          {"by_op_type", rows(p.by_op_type)}};
}

int cmd_run(const GlobalOptions& g, const RunArgs& a) {
  using clock = std::chrono::steady_clock;
  auto opts = runtime_options(g, a.threads);
  if (!opts.ok()) return fail(opts.status().message());

  backplane::ModelOptions mo;
  mo.backends = split(a.backends, ',');
  mo.allow_fallback = a.allow_fallback;
  mo.method = a.method;
  mo.external_data = a.external_data;
  mo.lazy_checksums = a.lazy_checksums;
  if (std::string e = parse_overrides(a.overrides, &mo); !e.empty()) return fail(e);
  if (std::string e = parse_shapes(a.shapes, &mo); !e.empty()) return fail(e);
  std::map<std::string, Tensor> given;
  for (const std::string& in : a.inputs) {
    size_t eq = in.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == in.size())
      return fail("--input expects NAME=FILE.npy, got '" + in + "'");
    auto t = backplane::npy::read(in.substr(eq + 1));
    if (!t.ok()) return fail(t.status().message());
    mo.input_shapes[in.substr(0, eq)] = t->shape();
    given[in.substr(0, eq)] = std::move(*t);
  }

  auto t0 = clock::now();
  auto rt = backplane::Runtime::create(*opts);
  if (!rt.ok()) return fail(rt.status().message());
  auto model = (*rt)->load_model(a.model, mo);
  if (!model.ok()) return fail(model.status().message());
  auto session = (*model)->create_session();
  if (!session.ok()) return fail(session.status().message());
  double ready_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  auto& s = **session;
  const auto& infos = (*model)->inputs();
  for (const auto& [name, tensor] : given) {
    Status st = s.set_input(name, tensor);
    if (!st.ok()) return fail(a.model + ": " + st.message());
  }
  bool generated = false;
  for (size_t i = 0; i < infos.size(); ++i) {
    // An input the model gives a default keeps it (the session starts with it).
    if (given.count(infos[i].name) || !infos[i].default_value.empty()) continue;
    generated = true;
    backplane::TensorInfo info = infos[i];
    auto hinted = mo.input_shapes.find(info.name);
    if (hinted != mo.input_shapes.end()) info.shape = hinted->second;
    if (std::any_of(info.shape.begin(), info.shape.end(), [](int64_t d) { return d < 0; }))
      return fail(a.model + ": input " + open_inputs(**model) +
                  " has open dims: give it with --input NAME=FILE.npy or its shape with "
                  "--shape NAME=DIMS");
    Status st = s.set_input(i, backplane::generated_input(info, static_cast<uint32_t>(i)));
    if (!st.ok()) return fail(st.message());
  }
  if (generated && !a.json)
    std::cerr << "note: inputs not given with --input are deterministic pseudo-random\n";
  if (!a.json)
    for (const std::string& n : (*model)->notes()) std::cerr << "note: " << n << "\n";

  // A trace that cannot be written is an error, after a run that is
  // otherwise the same: its outputs are still written.
  std::string profile_error;
  if (!a.profile.empty())
    if (Status st = s.start_profiling(a.profile); !st.ok()) profile_error = st.message();
  const bool profiling = !a.profile.empty() && profile_error.empty();

  Status first = s.run();
  if (!first.ok()) return fail(first.message());
  double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

  for (int i = 0; i < a.warmup; ++i) {
    Status st = s.run();
    if (!st.ok()) return fail(st.message());
  }
  std::vector<double> times;
  for (int i = 0; i < std::max(a.runs, 1); ++i) {
    auto r0 = clock::now();
    Status st = s.run();
    if (!st.ok()) return fail(st.message());
    times.push_back(std::chrono::duration<double, std::milli>(clock::now() - r0).count());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.size() % 2
                      ? sorted[sorted.size() / 2]
                      : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);

  if (!a.output_dir.empty()) {
    std::error_code ec;
    fs::create_directories(a.output_dir, ec);
    if (ec) return fail(a.output_dir + ": cannot create directory: " + ec.message());
    for (size_t i = 0; i < s.num_outputs(); ++i) {
      std::string path =
          (fs::path(a.output_dir) / (safe_file_name((*model)->outputs()[i].name) + ".npy"))
              .string();
      Status st = backplane::npy::write(path, s.output(i));
      if (!st.ok()) return fail(st.message());
    }
  }

  std::optional<backplane::ProfileSummary> profile;
  if (profiling) {
    auto ended = s.end_profiling();
    if (ended.ok()) profile = std::move(*ended);
    else profile_error = ended.status().message();
  }
  const int status = profile_error.empty() ? 0 : fail(profile_error);

  const auto& parts = (*model)->partitions();
  if (a.json) {
    json j;
    j["model"] = a.model;
    j["backends_used"] = (*model)->backends_used();
    j["partitions"] = json::array();
    for (const auto& p : parts)
      j["partitions"].push_back({{"backend", p.backend}, {"nodes", p.nodes}});
    j["copies"] = (*model)->copies().size();
    j["notes"] = (*model)->notes();
    j["load_ms"] = load_ms;    // runtime creation to first result
    j["ready_ms"] = ready_ms;  // runtime creation to a session ready to run
    j["latency_ms"] = {{"min", sorted.front()}, {"median", median}, {"max", sorted.back()}};
    j["runs"] = times.size();
    j["inputs_generated"] = generated;
    j["outputs"] = json::array();
    for (size_t i = 0; i < s.num_outputs(); ++i) {
      const Tensor& o = s.output(i);
      j["outputs"].push_back({{"name", (*model)->outputs()[i].name},
                              {"shape", o.shape()},
                              {"dtype", backplane::dtype_name(o.dtype())}});
    }
    if (profile) j["profile"] = profile_json(*profile);
    std::cout << j.dump() << "\n";
    return status;
  }
  std::printf("model      %s\n", a.model.c_str());
  std::printf("partitions %zu\n", parts.size());
  for (size_t i = 0; i < parts.size(); ++i)
    std::printf("  [%zu] %-10s %zu nodes (%s%s)\n", i, parts[i].backend.c_str(),
                parts[i].nodes.size(), parts[i].nodes.empty() ? "" : parts[i].nodes.front().c_str(),
                parts[i].nodes.size() > 1 ? (" .. " + parts[i].nodes.back()).c_str() : "");
  for (size_t i = 0; i < s.num_outputs(); ++i)
    std::printf("output     %s: %s\n", (*model)->outputs()[i].name.c_str(),
                summarize(s.output(i)).c_str());
  std::printf("load       %.2f ms to a ready session, %.2f ms to first result\n", ready_ms,
              load_ms);
  std::printf("latency    min %.3f ms, median %.3f ms, max %.3f ms over %zu runs (%d warm-up)\n",
              sorted.front(), median, sorted.back(), times.size(), a.warmup);
  if (profile) std::printf("%s", profile->to_string().c_str());
  return status;
}

struct ValidateArgs {
  std::string model;
  std::string backends;
  std::vector<std::string> overrides;
  std::vector<std::string> shapes;
  std::vector<std::string> inputs;
  int threads = 0;
  bool json = false;
  bool allow_fallback = false;
};

int cmd_validate(const GlobalOptions& g, const ValidateArgs& a) {
  auto opts = runtime_options(g, a.threads);
  if (!opts.ok()) return fail(opts.status().message());
  backplane::ValidateOptions vo;
  vo.backends = split(a.backends, ',');
  vo.allow_fallback = a.allow_fallback;
  if (std::string e = parse_overrides(a.overrides, &vo); !e.empty()) return fail(e);
  if (std::string e = parse_shapes(a.shapes, &vo); !e.empty()) return fail(e);
  for (const std::string& in : a.inputs) {
    size_t eq = in.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == in.size())
      return fail("--input expects NAME=FILE.npy, got '" + in + "'");
    auto t = backplane::npy::read(in.substr(eq + 1));
    if (!t.ok()) return fail(t.status().message());
    vo.inputs[in.substr(0, eq)] = std::move(*t);
  }
  return backplane::cli::run_validate(*opts, a.model, vo, a.json);
}

}  // namespace

// Replaces this process with backplane-serve from this program's directory,
// passing the global options it shares and the subcommand's arguments.
int exec_serve(const GlobalOptions& g, const std::vector<std::string>& rest) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path program = (ec ? fs::path(".") : self.parent_path()) / "backplane-serve";
  std::vector<std::string> args{program.string()};
  if (!g.backend_path.empty()) args.insert(args.end(), {"--backend-path", g.backend_path});
  if (g.no_dynamic) args.push_back("--no-dynamic-backends");
  for (const std::string& c : g.backend_config) args.insert(args.end(), {"--backend-config", c});
  if (g.log_level != "warn") args.insert(args.end(), {"--log-level", g.log_level});
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  execv(argv[0], argv.data());
  return fail(program.string() + ": cannot run it (" + std::strerror(errno) +
              "); backplane serve needs a build with BACKPLANE_WITH_SERVER=ON");
}

int main(int argc, char** argv) {
  CLI::App app{"Backplane: run neural networks on pluggable backends"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand: `backplane run M
                      // --backend-path D`
  GlobalOptions g;
  app.add_option("--backend-path", g.backend_path,
                 "Directory of dynamic backends (overrides every other source)");
  app.add_flag("--no-dynamic-backends", g.no_dynamic, "Do not load dynamic backends");
  app.add_flag("--probe-backends", g.probe,
               "Exercise each backend file in a child process before loading it");
  app.add_flag("--allow-insecure-backend-paths", g.allow_insecure,
               "Load backend files even if group or others may write them");
  app.add_option(
      "--disable-static-backend", g.disabled_static,
      "Do not register this statically linked backend (repeatable), e.g. to use its dynamic build");
  app.add_option("--backend-config", g.backend_config,
                 "Set a backend's key: BACKEND.KEY=VALUE, e.g. CpuOneDnn.layout=blocked "
                 "(repeatable; keys: docs/performance.md)");
  app.add_option("--log-level", g.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();

  bool backends_json = false;
  CLI::App* backends = app.add_subcommand("backends", "List the registered backends");
  backends->add_flag("--json", backends_json, "Print one JSON object");

  RunArgs r;
  CLI::App* run = app.add_subcommand("run", "Run a model");
  run->add_option("MODEL", r.model, "Model file (.onnx or a compiled .bpk)")->required();
  run->add_option("--backends", r.backends, "Backend preference, comma-separated (e.g. CpuRef)");
  run->add_option("--override", r.overrides, "Pin a node to a backend: NODE=BACKEND (repeatable)");
  run->add_option("--input", r.inputs, "Input from a .npy file: NAME=FILE.npy (repeatable)");
  run->add_option(
      "--shape", r.shapes,
      "Shape of an input given no --input (its open dims), e.g. ids=1x128 (repeatable)");
  run->add_option("--output-dir", r.output_dir, "Write each output as NAME.npy here");
  run->add_option("--runs", r.runs, "Timed runs")
      ->check(in_range(1, 1 << 30))
      ->capture_default_str();
  run->add_option("--warmup", r.warmup, "Untimed runs first")
      ->check(in_range(0, 1 << 30))
      ->capture_default_str();
  run->add_option("--threads", r.threads,
                  "Threads per backend (0 = default, at most " +
                      std::to_string(backplane::max_threads()) + " here)")
      ->check(in_range(0, backplane::max_threads()));
  run->add_flag("--json", r.json, "Print one JSON object");
  run->add_flag("--allow-fallback", r.allow_fallback,
                "A pinned node may fall back if its backend cannot run it");

  run->add_option("--method", r.method, "Method of a compiled artifact (default: the first)");
  run->add_option("--external-data", r.external_data,
                  "External data file (.bpd) of the artifact (repeatable)");
  run->add_option("--profile", r.profile,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of every run to this "
                  "file and print where the time went, by backend and operator type");
  run->add_flag("--lazy-checksums", r.lazy_checksums,
                "Verify artifact data checksums on first use, not at load");

  CompileArgs ca;
  CLI::App* compile =
      app.add_subcommand("compile", "Compile models ahead of time into one artifact (.bpk)");
  compile->add_option("MODEL", ca.models, "ONNX models, one method each (named after the file)");
  compile->add_option("--method", ca.methods, "A method from a model: NAME=FILE.onnx (repeatable)");
  compile->add_option("-o,--output", ca.output, "The artifact to write")->required();
  compile->add_option("--backends", ca.backends, "Backend preference, comma-separated");
  compile->add_option("--override", ca.overrides,
                      "Pin a node to a backend: NODE=BACKEND (repeatable)");
  compile->add_flag("--allow-fallback", ca.allow_fallback, "A pinned node may fall back");
  compile->add_option("--shape", ca.shapes,
                      "Shape to compile an input with open dims for: NAME=DIMS, a dim may be a "
                      "range LO..HI (both ends compiled); a name given again starts another "
                      "specialisation, one given once counts for all (repeatable)");
  compile->add_option("--external-data", ca.external_data,
                      "Put the weights in this data file (.bpd), next to the .bpk");
  compile->add_flag("--no-shape-polymorphic", ca.no_shape_polymorphic,
                    "Store every signature's own compiled partitions, also where a backend "
                    "compiles them shape-polymorphic");
  compile->add_flag("--json", ca.json, "Print one JSON object");
  compile
      ->add_option("--threads", ca.threads,
                   "Threads the artifact is compiled for (0 = default): a backend may choose "
                   "memory layouts per thread count, and a payload loaded at another count is "
                   "recompiled, with a note")
      ->check(in_range(0, backplane::max_threads()));

  std::string inspect_file;
  std::vector<std::string> inspect_external;
  bool inspect_json = false;
  CLI::App* inspect = app.add_subcommand("inspect", "Describe a compiled artifact");
  inspect->add_option("FILE", inspect_file, "The artifact (.bpk)")->required();
  inspect->add_option("--external-data", inspect_external,
                      "External data file (.bpd) (repeatable)");
  inspect->add_flag("--json", inspect_json, "Print one JSON object");

  PartitionArgs pa;
  CLI::App* partition =
      app.add_subcommand("partition", "Show which backend runs which node, and why");
  partition->add_option("MODEL", pa.model, "Model file (.onnx)")->required();
  partition->add_option("--backends", pa.backends, "Backend preference, comma-separated");
  partition->add_option("--override", pa.overrides,
                        "Pin a node to a backend: NODE=BACKEND (repeatable)");
  partition->add_flag("--allow-fallback", pa.allow_fallback, "A pinned node may fall back");
  partition->add_option("--shape", pa.shapes,
                        "Shape to plan an input with open dims for: NAME=DIMS (repeatable)");
  partition->add_flag("--json", pa.json, "Print one JSON object");
  partition->add_option("--dot", pa.dot, "Write the plan as a Graphviz DOT file");

  ValidateArgs va;
  CLI::App* validate = app.add_subcommand(
      "validate",
      "Compare a plan with CpuRef tensor by tensor; on a difference, find the first wrong node "
      "and what its backend fused it with (exit status 1)");
  validate->add_option("MODEL", va.model, "Model file (.onnx)")->required();
  validate->add_option("--backends", va.backends,
                       "Backend preference of the plan to check, comma-separated (default: "
                       "every backend, as run)");
  validate->add_option("--override", va.overrides,
                       "Pin a node to a backend: NODE=BACKEND (repeatable)");
  validate->add_flag("--allow-fallback", va.allow_fallback, "A pinned node may fall back");
  validate->add_option("--input", va.inputs,
                       "Input from a .npy file: NAME=FILE.npy (repeatable; others are generated "
                       "as by run)");
  validate->add_option("--shape", va.shapes,
                       "Shape of an input given no --input (its open dims), e.g. ids=1x128 "
                       "(repeatable)");
  validate
      ->add_option("--threads", va.threads,
                   "Threads per backend (0 = default, at most " +
                       std::to_string(backplane::max_threads()) + " here)")
      ->check(in_range(0, backplane::max_threads()));
  validate->add_flag("--json", va.json, "Print one JSON object");

  backplane::cli::OpsCommand ops;
  backplane::cli::add_ops_command(app, &ops);

  backplane::cli::ConformanceCommand conformance;
  backplane::cli::add_conformance_command(app, &conformance);

  // `backplane serve` is the program backplane-serve installed beside this
  // one: the CLI itself does not link the server's network libraries.
  CLI::App* serve = app.add_subcommand(
      "serve", "Serve models over HTTP and gRPC (the Open Inference Protocol); "
               "`backplane serve --help` for its options");
  serve->prefix_command();
  serve->set_help_flag();

  // Everything after `serve` is backplane-serve's, --help included.
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0)
    return exec_serve(g, std::vector<std::string>(argv + 2, argv + argc));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --help-all are successes; every other parse error is a
    // usage error: "error: ..." and exit status 2, like every other failure.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << "error: " << e.what() << "\n"
              << "Run 'backplane --help' (or 'backplane COMMAND --help') for the options.\n";
    return 2;
  }
  if (*serve) return exec_serve(g, serve->remaining());
  int status = 2;
  try {
    if (*backends) status = cmd_backends(g, backends_json);
    else if (*run) status = cmd_run(g, r);
    else if (*partition) status = cmd_partition(g, pa);
    else if (*compile) status = cmd_compile(g, ca);
    else if (*inspect) status = cmd_inspect(inspect_file, inspect_external, inspect_json);
    else if (*validate) status = cmd_validate(g, va);
    else if (ops.selected()) status = ops.run();
    else if (conformance.selected()) {
      auto o = runtime_options(g, 0);
      status = o.ok() ? conformance.run(*o) : fail(o.status().message());
    }
  } catch (const std::exception& e) {
    return fail(std::string("unexpected: ") + e.what());
  }
  // What a command printed is its result: losing it (stdout on a full disk,
  // a closed pipe) is a failure, not a success.
  std::cout.flush();
  if (status == 0 && !std::cout)
    return fail(std::string("writing standard output failed: ") + std::strerror(errno));
  return status;
}
