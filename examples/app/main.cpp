// backplane_app: the smallest useful application embedding Backplane.
//
//   backplane_app MODEL.onnx [BACKEND,BACKEND,...]
//
// Creates a runtime (static backends + dynamic ones from the usual places:
// BACKPLANE_BACKEND_PATHS, else the install's lib/backplane/backends), loads
// the model with an optional backend preference, fills every float32 input
// with a ramp (-1, -0.75, -0.5, ...), runs it once and prints the plan and
// every output.
#include <backplane/runtime.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [BACKEND,...]\n", argv[0]);
    return 2;
  }
  backplane::RuntimeOptions runtime_options;  // defaults: discover dynamic backends
  auto runtime = backplane::Runtime::create(runtime_options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "error: %s\n", runtime.status().message().c_str());
    return 1;
  }

  backplane::ModelOptions model_options;
  if (argc == 3) {
    std::stringstream list(argv[2]);
    for (std::string id; std::getline(list, id, ',');)
      if (!id.empty()) model_options.backends.push_back(id);
  }
  auto model = (*runtime)->load_model(argv[1], model_options);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  for (const backplane::PartitionDescription& p : (*model)->partitions()) {
    std::printf("partition on %s:", p.backend.c_str());
    for (const std::string& node : p.nodes) std::printf(" %s", node.c_str());
    std::printf("\n");
  }

  auto session = (*model)->create_session();
  if (!session.ok()) {
    std::fprintf(stderr, "error: %s\n", session.status().message().c_str());
    return 1;
  }
  for (const backplane::TensorInfo& info : (*model)->inputs()) {
    if (info.dtype != backplane::DType::kFloat32) {
      std::fprintf(stderr, "error: input '%s' is not float32\n", info.name.c_str());
      return 1;
    }
    backplane::Tensor input(info.dtype, info.shape);
    float* x = input.data_as<float>();
    for (int64_t i = 0; i < input.numel(); ++i) x[i] = -1.0f + 0.25f * static_cast<float>(i);
    if (backplane::Status s = (*session)->set_input(info.name, input); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
  }
  if (backplane::Status s = (*session)->run(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  for (const backplane::TensorInfo& info : (*model)->outputs()) {
    auto y = (*session)->get_output(info.name);
    if (!y.ok()) {
      std::fprintf(stderr, "error: %s\n", y.status().message().c_str());
      return 1;
    }
    std::printf("%s %s %s:", info.name.c_str(), backplane::dtype_name(y->dtype()),
                backplane::shape_to_string(y->shape()).c_str());
    if (y->dtype() == backplane::DType::kFloat32)
      for (int64_t i = 0; i < y->numel(); ++i) std::printf(" %g", y->data_as<float>()[i]);
    std::printf("\n");
  }
  return 0;
}
