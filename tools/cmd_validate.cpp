// `backplane validate`: prints backplane::validate's report.
#include "cmd_validate.hpp"

#include <cstdio>
#include <iostream>

namespace backplane::cli {
namespace {

std::string port_text(const PortDescription& p) {
  return p.name + " " + dtype_name(p.dtype) + shape_to_string(p.shape) +
         (p.constant ? " (constant)" : "");
}

void print_text(const std::string& model, const ValidationReport& r) {
  std::string backends;
  for (const std::string& b : r.backends) backends += (backends.empty() ? "" : ", ") + b;
  std::printf("model      %s\n", model.c_str());
  const auto count = [](size_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  std::printf("plan       %s: %s, %s (%zu off CpuRef)\n", backends.c_str(),
              count(r.partitions, "partition").c_str(), count(r.nodes, "node").c_str(),
              r.nodes_off_cpuref);
  if (!r.generated_inputs.empty()) {
    std::string names;
    for (const std::string& n : r.generated_inputs) names += (names.empty() ? "" : ", ") + n;
    std::printf("inputs     %s: deterministic pseudo-random (give --input NAME=FILE.npy)\n",
                names.c_str());
  }
  size_t outputs = 0, differ = 0;
  for (const TensorCheck& c : r.checks) {
    outputs += c.model_output ? 1 : 0;
    differ += c.within() ? 0 : 1;
  }
  std::printf("checked    %s (%s, %zu crossing partition edges) against CpuRef: ",
              count(r.checks.size(), "tensor").c_str(), count(outputs, "model output").c_str(),
              r.checks.size() - outputs);
  if (differ == 0) {
    std::printf("all match\n");
  } else {
    std::printf("%zu differ\n", differ);
    size_t shown = 0;
    for (const TensorCheck& c : r.checks) {
      if (c.within()) continue;
      if (++shown > 8) {
        std::printf("  ... %zu more (--json lists them all)\n", differ - 8);
        break;
      }
      std::printf("  %s%s, from '%s' on %s: %s\n", c.name.c_str(),
                  c.model_output ? " (output)" : "", c.producer.c_str(), c.backend.c_str(),
                  c.describe().c_str());
    }
  }
  if (r.wrong) {
    const WrongNode& w = *r.wrong;
    std::printf("first wrong node\n");
    std::printf("  node     '%s' (%s%s%s) on %s\n", w.name.c_str(),
                w.domain.empty() ? "" : w.domain.c_str(),
                w.domain.empty() ? "" : "::", w.op_type.c_str(), w.backend.c_str());
    if (w.group.size() > 1) {
      std::string with;
      for (size_t i = 0; i + 1 < w.group.size(); ++i)
        with += (with.empty() ? "'" : ", '") + w.group[i] + "' (" + w.group_ops[i] + ")";
      std::printf("  group    with %s: wrong only when these run on %s together (what %s fused)\n",
                  with.c_str(), w.backend.c_str(), w.backend.c_str());
    } else {
      std::printf("  group    none: wrong on its own\n");
    }
    for (const PortDescription& p : w.inputs) std::printf("  input    %s\n", port_text(p).c_str());
    for (const PortDescription& p : w.outputs) std::printf("  output   %s\n", port_text(p).c_str());
    if (!w.tensor.empty()) std::printf("  error    %s: %s\n", w.tensor.c_str(), w.error.c_str());
  }
  if (!r.note.empty()) std::printf("note       %s\n", r.note.c_str());
  std::printf("%s in %zu plans, %.2f s\n", r.ok ? "matches CpuRef" : "differs from CpuRef", r.plans,
              r.seconds);
}

}  // namespace

int run_validate(const RuntimeOptions& runtime, const std::string& model,
                 const ValidateOptions& options, bool as_json) {
  auto rt = Runtime::create(runtime);
  if (!rt.ok()) {
    std::cerr << "error: " << rt.status().message() << "\n";
    return 1;
  }
  Result<ValidationReport> report = validate(**rt, model, options);
  if (!report.ok()) {
    std::cerr << "error: " << report.status().message() << "\n";
    return 1;
  }
  if (as_json) std::cout << validation_report_json(*report, model) << "\n";
  else print_text(model, *report);
  return report->ok ? 0 : 1;
}

}  // namespace backplane::cli
