// `backplane inspect`: an artifact described from the artifact layer's C++
// API (ArtifactFile), as JSON or as text built from that JSON.
#include "artifact/artifact.hpp"

#include <backplane/runtime.hpp>

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

namespace backplane {
namespace {

nlohmann::json describe_partitions(const ArtifactFile& file,
                                   const std::vector<StoredPartition>& partitions,
                                   uint64_t* payload_bytes) {
  nlohmann::json out = nlohmann::json::array();
  for (const StoredPartition& p : partitions) {
    uint64_t payload =
        p.payload_segment >= 0 ? file.segments()[static_cast<size_t>(p.payload_segment)].size : 0;
    *payload_bytes += payload;
    out.push_back({{"backend", p.backend},
                   {"api_version", std::to_string(p.api_major) + "." + std::to_string(p.api_minor)},
                   {"nodes", p.nodes.size()},
                   {"imperative", p.imperative},
                   {"polymorphic", p.polymorphic},
                   {"payload_bytes", payload}});
  }
  return out;
}

// "[batch,seq,16]": the model's dim names where it has them, else sizes.
std::string declared(const ir::Value& v) {
  if (!v.has_shape) return "(any shape)";
  std::string out = "[";
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (d > 0) out += ",";
    if (d < v.dim_params.size() && !v.dim_params[d].empty()) out += v.dim_params[d];
    else out += v.shape[d] < 0 ? "?" : std::to_string(v.shape[d]);
  }
  return out + "]";
}

Result<nlohmann::json> describe_method(const ArtifactFile& file, int index) {
  const StoredMethod& m = file.methods()[static_cast<size_t>(index)];
  // Loading the method checks it as loading a model would.
  BP_ASSIGN_OR_RETURN(LoadedMethod loaded, file.load_method(index));
  const ir::Graph& g = loaded.portable;
  nlohmann::json mj;
  mj["name"] = m.name;
  mj["portable_nodes"] = m.num_nodes;
  mj["inputs"] = nlohmann::json::array();
  for (int v : g.inputs)
    mj["inputs"].push_back({{"name", g.values[v].name},
                            {"shape", g.values[v].shape},
                            {"declared", declared(g.values[v])},
                            {"dtype", dtype_name(g.values[v].dtype)}});
  mj["specializations"] = nlohmann::json::array();
  for (const StoredSpecialization& s : loaded.specializations) {
    nlohmann::json sj;
    sj["signature"] = nlohmann::json::array();
    for (size_t i = 0; i < s.signature.size(); ++i)
      sj["signature"].push_back({{"name", g.values[g.inputs[i]].name}, {"shape", s.signature[i]}});
    uint64_t payload = 0;
    sj["nodes"] = s.num_nodes;
    sj["partitions"] = describe_partitions(file, s.partitions, &payload);
    sj["payload_bytes"] = payload;
    mj["specializations"].push_back(std::move(sj));
  }
  // The first specialisation, as format 1.0 described a method.
  mj["nodes"] = mj["specializations"][0]["nodes"];
  mj["partitions"] = mj["specializations"][0]["partitions"];
  return mj;
}

// Named data: per key, and de-duplication savings (keys sharing a segment).
void describe_named_data(const ArtifactFile& file, nlohmann::json* j) {
  std::map<uint32_t, size_t> users;
  uint64_t requested = 0, stored = 0;
  (*j)["named_data"] = nlohmann::json::array();
  for (const ArtifactNamedData& d : file.named_data()) {
    const ArtifactSegment& s = file.segments()[d.segment];
    std::string where = s.file == 0 ? "(artifact)" : file.data_files()[s.file - 1].name;
    (*j)["named_data"].push_back({{"key", d.key},
                                  {"bytes", s.size},
                                  {"alignment", s.alignment},
                                  {"file", where},
                                  {"segment", d.segment}});
    requested += s.size;
    if (users[d.segment]++ == 0) stored += s.size;
  }
  (*j)["named_data_bytes"] = {
      {"requested", requested}, {"stored", stored}, {"saved_by_dedup", requested - stored}};
}

std::string as_text(const nlohmann::json& j) {
  std::ostringstream os;
  os << "artifact   " << j["file"].get<std::string>() << " (format "
     << j["format"].get<std::string>() << ", " << j["file_bytes"] << " bytes, "
     << j["producer"].get<std::string>() << ")\n";
  os << "compile id " << j["compile_id"].get<std::string>() << "\n";
  for (const auto& d : j["data_files"])
    os << "data file  " << d["name"].get<std::string>() << " (" << d["data_bytes"]
       << " data bytes)\n";
  for (const auto& m : j["methods"]) {
    os << "method     " << m["name"].get<std::string>() << ": " << m["portable_nodes"]
       << " nodes, inputs";
    for (const auto& in : m["inputs"])
      os << " " << in["name"].get<std::string>() << in["declared"].get<std::string>();
    os << ", " << m["specializations"].size() << " specialisation"
       << (m["specializations"].size() == 1 ? "" : "s") << "\n";
    for (const auto& s : m["specializations"]) {
      std::string signature;
      for (const auto& in : s["signature"]) {
        if (!signature.empty()) signature += ' ';
        signature +=
            in["name"].get<std::string>() + "=" + shape_to_string(in["shape"].get<Shape>());
      }
      os << "  specialisation " << signature << ": " << s["nodes"] << " nodes, "
         << s["partitions"].size() << " partitions, payload " << s["payload_bytes"] << " bytes\n";
      size_t i = 0;
      for (const auto& p : s["partitions"])
        os << "    [" << i++ << "] " << p["backend"].get<std::string>() << " (api "
           << p["api_version"].get<std::string>() << "): " << p["nodes"] << " nodes, payload "
           << p["payload_bytes"] << " bytes" << (p["imperative"].get<bool>() ? ", imperative" : "")
           << (p["polymorphic"].get<bool>() ? ", shape-polymorphic (compiled at load)" : "")
           << "\n";
    }
  }
  const auto& bytes = j["named_data_bytes"];
  os << "named data " << j["named_data"].size() << " keys, " << bytes["requested"]
     << " bytes requested, " << bytes["stored"] << " stored (" << bytes["saved_by_dedup"]
     << " saved by de-duplication)\n";
  for (const auto& d : j["named_data"])
    os << "  " << d["key"].get<std::string>() << ": " << d["bytes"] << " bytes, align "
       << d["alignment"] << ", " << d["file"].get<std::string>() << ", segment " << d["segment"]
       << "\n";
  return os.str();
}

}  // namespace

Result<std::string> inspect_artifact(const std::string& path, bool json,
                                     const std::vector<std::string>& external) {
  BP_ASSIGN_OR_RETURN(std::shared_ptr<ArtifactFile> file,
                      ArtifactFile::open(path, external, false));
  nlohmann::json j;
  j["file"] = path;
  j["format"] = std::to_string(file->format_major()) + "." + std::to_string(file->format_minor());
  j["producer"] = file->producer();
  j["compile_id"] = file->compile_id_hex();
  j["file_bytes"] = file->file_size();
  j["data_files"] = nlohmann::json::array();
  for (const ArtifactDataFile& d : file->data_files())
    j["data_files"].push_back({{"name", d.name}, {"data_bytes", d.data_bytes}});
  j["methods"] = nlohmann::json::array();
  for (size_t m = 0; m < file->methods().size(); ++m) {
    BP_ASSIGN_OR_RETURN(nlohmann::json mj, describe_method(*file, static_cast<int>(m)));
    j["methods"].push_back(std::move(mj));
  }
  describe_named_data(*file, &j);
  return json ? j.dump(2) : as_text(j);
}

}  // namespace backplane
