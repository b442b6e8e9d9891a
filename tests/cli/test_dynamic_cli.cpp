// `backplane backends --json` over a directory of good, duplicate, malformed
// and crashing backends: the command succeeds and reports every file's fate.
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kMocks = BACKPLANE_TESTING_BACKENDS_DIR;

struct Output {
  int exit_code = -1;
  std::string out;
};

// Runs the CLI with `args`; stdout captured, stderr left to the test log
// (unless `args` redirects it). `env`: assignments put before the command
// ("NAME=value ").
Output run_cli(const std::string& args, const std::string& env = "") {
  Output o;
  std::string cmd = env + "'" + BACKPLANE_CLI + "' " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  int status = ::pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

const json* file_entry(const json& j, const std::string& name) {
  for (const json& f : j.at("files"))
    if (fs::path(f.at("path").get<std::string>()).filename() == name) return &f;
  return nullptr;
}

#define EXPECT_FILE(j, name, status_, step_, reason_part)                               \
  do {                                                                                  \
    const json* f_ = file_entry((j), (name));                                           \
    ASSERT_NE(f_, nullptr) << (name) << " not listed";                                  \
    EXPECT_EQ(f_->at("status"), (status_)) << (name) << ": " << f_->dump();             \
    EXPECT_EQ(f_->at("step"), (step_)) << (name) << ": " << f_->dump();                 \
    EXPECT_NE(f_->at("reason").get<std::string>().find(reason_part), std::string::npos) \
        << (name) << ": " << f_->dump();                                                \
  } while (0)

TEST(DynamicBackendsCli, BackendsJsonReportsEveryFileWithProbe) {
  const std::string dir = kMocks + "/cli";
  // Global options after the subcommand, as documented usage writes them.
  Output o =
      run_cli("backends --backend-path '" + dir + "' --probe-backends --log-level off --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  json j = json::parse(o.out);

  // Registered: the static CpuRef and the one good dynamic MockA.
  bool cpuref = false, mock = false;
  for (const json& b : j.at("backends")) {
    if (b.at("id") == "CpuRef") {
      cpuref = true;
      EXPECT_EQ(b.at("source"), "static");
    }
    if (b.at("id") == "MockA") {
      mock = true;
      EXPECT_EQ(b.at("source"), "dynamic");
      EXPECT_EQ(b.at("path"), fs::canonical(dir + "/Mock_MockA_backend.so").string());
      EXPECT_EQ(b.at("description"), "A");
    }
  }
  EXPECT_TRUE(cpuref);
  EXPECT_TRUE(mock);
  EXPECT_EQ(j.at("backends").size(), 2u);

  ASSERT_EQ(j.at("files").size(), 5u) << j.at("files").dump(1);
  EXPECT_FILE(j, "Mock_MockA_backend.so", "loaded", "", "");
  EXPECT_FILE(j, "Other_MockA_backend.so", "superseded", "register", "same id 'MockA'");
  EXPECT_FILE(j, "Mock_CrashCreate_backend.so", "rejected", "probe", "signal 11");
  EXPECT_FILE(j, "Mock_NoId_backend.so", "rejected", "probe", "missing entry point");
  EXPECT_FILE(j, "Mock_Text_backend.so", "rejected", "probe", "dlopen");
  EXPECT_EQ(file_entry(j, "Mock_MockA_backend.so")->at("id"), "MockA");
  EXPECT_EQ(file_entry(j, "Other_MockA_backend.so")->at("id"), "MockA");

  ASSERT_EQ(j.at("paths").size(), 1u);
  EXPECT_EQ(j.at("paths")[0].at("path"), dir);
  EXPECT_EQ(j.at("paths")[0].at("used"), true);
}

TEST(DynamicBackendsCli, BackendsJsonWithoutProbeGivesEachFailingStep) {
  // No crashing file here: without the probe it would take the CLI down.
  const std::string dir = kMocks + "/bad_table";
  Output o = run_cli("--backend-path '" + dir + "' --log-level off backends --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  json j = json::parse(o.out);
  ASSERT_EQ(j.at("files").size(), 3u);
  EXPECT_FILE(j, "Mock_Refuse_backend.so", "rejected", "create", "mock refuses");
  EXPECT_FILE(j, "Mock_NullSlot_backend.so", "rejected", "table", "query_support");
  EXPECT_FILE(j, "Mock_SmallTable_backend.so", "rejected", "table", "struct_size");

  o = run_cli("--backend-path '" + kMocks + "/missing_symbols' --log-level off backends --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  j = json::parse(o.out);
  EXPECT_FILE(j, "Mock_NoId_backend.so", "rejected", "symbols", "GetBackendId");
  EXPECT_FILE(j, "Mock_NoFactory_backend.so", "rejected", "symbols", "BackendFactory");
}

TEST(DynamicBackendsCli, MisnamedFilesAreListedWithTheReason) {
  // Text output, as a user reads it: the two misnamed files are rejected at
  // "name", the right one is loaded.
  Output o = run_cli("backends --backend-path '" + kMocks + "/misnamed' --log-level off");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("rejected   " + kMocks + "/misnamed/Acme_Npu_backend.so"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("name: the file is named for id 'Npu' but GetBackendId() returns 'AcmeNpu'"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("loaded     " + kMocks + "/misnamed/Acme_AcmeNpu_backend.so"),
            std::string::npos)
      << o.out;
  // A shared object whose name does not follow the scheme is listed too.
  o = run_cli("backends --backend-path '" + kMocks + "/invalid_files' --log-level off --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  json j = json::parse(o.out);
  EXPECT_FILE(j, "Mock_MockA.so", "rejected", "name", "does not follow");
}

TEST(DynamicBackendsCli, TraceLogsEveryAbiCallWithBackendAndSlot) {
  backplane::test::TempDir tmp;
  const std::string model = tmp.file("relu.onnx");
  backplane::test::write_relu_model(model, {2, 3});
  const std::string err = tmp.file("stderr.txt");
  Output o = run_cli("run '" + model + "' --backend-path '" + kMocks +
                     "/valid' --backends MockA --log-level trace 2>'" + err + "'");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  std::string log = backplane::test::read_text(err);
  for (const char* slot : {"create", "get_info", "query_support", "compile", "context_create",
                           "execute", "context_destroy", "compiled_destroy", "destroy"}) {
    EXPECT_NE(log.find(std::string("abi call MockA.") + slot + " "), std::string::npos)
        << slot << "\n"
        << log;
    EXPECT_NE(log.find(std::string("abi return MockA.") + slot + ": ok"), std::string::npos)
        << slot << "\n"
        << log;
  }
  // The static CpuRef is traced the same way.
  EXPECT_NE(log.find("abi call CpuRef.create"), std::string::npos) << log;
  // Without trace, nothing of it.
  o = run_cli("run '" + model + "' --backend-path '" + kMocks +
              "/valid' --backends MockA --log-level debug 2>'" + err + "'");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(backplane::test::read_text(err).find("abi call"), std::string::npos);
}

TEST(DynamicBackendsCli, CrashInExecuteIsNamedByTheProbeAndByTrace) {
  backplane::test::TempDir tmp;
  const std::string dir = tmp.file("backends");
  std::filesystem::create_directory(dir);
  std::filesystem::permissions(
      dir, std::filesystem::perms::group_write | std::filesystem::perms::others_write,
      std::filesystem::perm_options::remove);
  std::filesystem::copy_file(kMocks + "/crash/Mock_CrashExecute_backend.so",
                             dir + "/Mock_CrashExecute_backend.so");
  const std::string model = tmp.file("relu.onnx");
  backplane::test::write_relu_model(model, {2, 3});
  const std::string err = tmp.file("stderr.txt");
  // With the probe: the backend is rejected, naming the slot, and the run
  // goes on without it.
  Output o =
      run_cli("backends --backend-path '" + dir + "' --probe-backends --log-level off --json");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  json j = json::parse(o.out);
  EXPECT_FILE(j, "Mock_CrashExecute_backend.so", "rejected", "probe",
              "probe crashed in slot 'execute': killed by signal 11");
  o = run_cli("run '" + model + "' --backend-path '" + dir + "' --probe-backends --json 2>'" + err +
              "'");
  EXPECT_EQ(o.exit_code, 0) << o.out << backplane::test::read_text(err);
  EXPECT_NE(backplane::test::read_text(err).find("probe crashed in slot 'execute'"),
            std::string::npos);
  // Without it the process dies; at trace level the last line says where.
  // (In a sanitizer build the CLI dies by SIGSEGV too: ASan leaves the signal
  // alone, rather than turning it into a report and an abort.)
  const char* asan = std::getenv("ASAN_OPTIONS");
  o = run_cli("run '" + model + "' --backend-path '" + dir +
                  "' --backends CrashExecute --log-level trace 2>'" + err + "'",
              "ASAN_OPTIONS='" + std::string(asan != nullptr ? asan : "") + ":handle_segv=0' ");
  EXPECT_EQ(o.exit_code, 128 + SIGSEGV) << o.out;
  std::string log = backplane::test::read_text(err);
  ASSERT_FALSE(log.empty());
  std::string last = log.substr(log.rfind("[backplane", log.size() - 2));
  EXPECT_NE(last.find("abi call CrashExecute.execute "), std::string::npos) << log;
}

TEST(DynamicBackendsCli, NoBackendAtAllFailsWithExitCode1) {
  Output o = run_cli("--backend-path '" + kMocks +
                     "/empty' --disable-static-backend CpuRef --log-level off "
                     "backends --json 2>/dev/null");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_TRUE(o.out.empty()) << o.out;
}

}  // namespace
