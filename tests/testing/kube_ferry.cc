#include "tests/testing/kube_ferry.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tests/testing/command.h"
#include "tests/testing/process_groups.h"

namespace ferry::testing {

absl::StatusOr<std::string> BinaryRoot(const std::string& binary, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir + "/usr/bin", error);
  std::filesystem::copy_file(
      binary, dir + "/usr/bin/" + std::filesystem::path(binary).filename().string(), error);
  if (error) return absl::InternalError(absl::StrCat("copy ", binary, ": ", error.message()));
  absl::StatusOr<CommandResult> ldd = RunCommand({"/usr/bin/ldd", binary}, absl::Seconds(30));
  if (!ldd.ok()) return ldd.status();
  for (absl::string_view line : absl::StrSplit(ldd->output, '\n')) {
    // "libx.so.1 => /lib/x86_64-linux-gnu/libx.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2
    // (0x...)"
    const size_t slash = line.find('/');
    if (slash == absl::string_view::npos) continue;
    const std::string library(line.substr(slash, line.find(' ', slash) - slash));
    const std::string copy = dir + library;
    std::filesystem::create_directories(std::filesystem::path(copy).parent_path(), error);
    if (!std::filesystem::exists(copy)) std::filesystem::copy_file(library, copy, error);
    if (error) return absl::InternalError(absl::StrCat("copy ", library, ": ", error.message()));
  }
  std::filesystem::create_directories(dir + "/tmp", error);
  return dir;
}

absl::Status FerryReady(KubeCluster& cluster) {
  const absl::Status ready =
      cluster.WaitForJsonPath({"-n", "ferry", "daemonset", "ferry-server"}, "{.status.numberReady}",
                              "1", absl::Seconds(120));
  if (ready.ok()) return ready;
  return absl::Status(ready.code(), absl::StrCat(ready.message(), "\n", cluster.DiagnosticLogs()));
}

std::string FerryManifest(const KubeCluster& cluster, const std::string& manifest,
                          const std::string& node_dirs) {
  const std::string text = ReadTextFile(manifest);
  if (text.empty()) return "";
  // The API server is at the node's address: this cluster runs no kube-proxy, so the
  // agent is told that address rather than the `kubernetes` service's.
  const std::string node_name_line =
      "        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}\n";
  const std::string api_server = absl::StrCat(
      node_name_line, "        - {name: KUBERNETES_SERVICE_HOST, value: \"", cluster.node_ip(),
      "\"}\n", "        - {name: KUBERNETES_SERVICE_PORT, value: \"",
      cluster.api_server_url().substr(cluster.api_server_url().rfind(':') + 1), "\"}\n");
  return absl::StrReplaceAll(
      text, {{"path: /var/lib/ferry", "path: " + node_dirs}, {node_name_line, api_server}});
}

absl::Status StartFerryOnTheNode(KubeCluster& cluster, const std::string& ferry_server,
                                 const std::string& agent, const std::string& manifest,
                                 const std::string& image_dir, const std::string& node_dirs) {
  FERRY_ASSIGN_OR_RETURN(const std::string root, BinaryRoot(ferry_server, image_dir));
  std::error_code error;
  std::filesystem::copy_file(agent, root + "/usr/bin/ferry-k8s-agent", error);
  if (error) return absl::InternalError(absl::StrCat("copy ", agent, ": ", error.message()));
  FERRY_RETURN_IF_ERROR(
      cluster.LoadImage("ferry.local/ferry-server:0.1.0", root, {"/usr/bin/ferry_server"}));
  const std::string text = FerryManifest(cluster, manifest, node_dirs);
  if (text.empty()) return absl::NotFoundError(absl::StrCat("no manifest at ", manifest));
  FERRY_RETURN_IF_ERROR(cluster.Apply(text));
  return FerryReady(cluster);
}

std::string SparkImageArchive(const std::string& version) {
  const char* dir = std::getenv("FERRY_K8S_IMAGES");
  return absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/opt/ferry-k8s/images", "/spark-",
                      version, "_oci.tar");
}

}  // namespace ferry::testing
