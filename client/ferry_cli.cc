// ferry: the command-line client. Its commands, their usage lines and the flags each
// reads are in main's table, which `ferry help [COMMAND]` prints. ls, info, fetch and
// health take --json (one line of JSON on stdout). `fetch` draws a progress line on
// stderr when it is a terminal. Exit codes: 0 done, 1 the command failed (the error is
// one line on stderr naming what failed), 2 bad usage.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/shuffle_client.h"
#include "common/auth_token.h"
#include "common/flag_names.h"
#include "common/shuffle_writer.h"
#include "common/version.h"

ABSL_FLAG(std::string, dir, "", "Directory to write <app>/ shuffle files into.");
ABSL_FLAG(int, apps, 1, "Number of apps (app-0, app-1, ...).");
ABSL_FLAG(int, shuffles, 1, "Shuffles per app.");
ABSL_FLAG(int, maps, 16, "Map outputs per shuffle.");
ABSL_FLAG(int, first_map, 0,
          "The first map id (map outputs first-map .. first-map + maps - 1), so that "
          "several nodes' data sets make up one shuffle.");
ABSL_FLAG(int, partitions, 64, "Reduce partitions per map output.");
ABSL_FLAG(std::string, total_bytes, "1G", "Total data size (K, M, G suffixes: powers of 1024).");
ABSL_FLAG(std::string, distribution, "uniform",
          "Partition sizes: uniform (0.5x to 1.5x the mean), exponential (skewed, with "
          "empty and tiny partitions) or fixed (every partition the mean).");
ABSL_FLAG(std::string, layout, "ferry",
          "ferry (DIR/<app>/shuffle_*) or spark (executor 0 of each app: its files hashed "
          "over DIR/local<k>/blockmgr-<app>/<%02x>/ as Spark's ExecutorDiskUtils places them)");
ABSL_FLAG(int, spark_local_dirs, 2, "Local dirs per executor.");
ABSL_FLAG(int, subdirs, 64, "Subdirectories per local dir.");
ABSL_FLAG(uint64_t, seed, 1, "Random seed; the same flags and seed give the same files.");
ABSL_FLAG(std::string, server, "127.0.0.1:7070",
          "Control-plane address of a ferry_server. fetch takes a comma-separated list: a "
          "reducer fetching from every node at once, each map output from the first server "
          "that lists it, the others that list it its replicas.");
ABSL_FLAG(std::string, app, "",
          "The app: app-0 when not given (ls without it lists the apps). gen writes this one "
          "app (with --apps=1); without it, gen writes app-0 .. app-<apps-1>.");
ABSL_FLAG(bool, force, false,
          "Write over map outputs that exist already (without it, gen refuses to).");
ABSL_FLAG(bool, json, false, "Print the result as one line of JSON.");
ABSL_FLAG(std::string, exec_id, "", "One executor of the app (empty: all of its executors).");
ABSL_FLAG(bool, delete_local_dirs, false,
          "Also delete the executors' local dirs and everything in them.");
ABSL_FLAG(int, shuffle, -1, "Only this shuffle id (-1: every shuffle of the app).");
ABSL_FLAG(std::string, to, "",
          "Write each block to a file under this directory (with "
          "splice); empty discards the bytes after verifying them.");
ABSL_FLAG(bool, verify, true, "Verify stored checksums.");
ABSL_FLAG(bool, batch, false,
          "Ask for each map output's partitions as one contiguous segment (Spark's "
          "batch fetch) instead of one block per partition.");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA certificates: reach the control plane over TLS and check the server's "
          "certificate against them.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the server's shared secret, when it requires one.");
ABSL_FLAG(std::string, max_in_flight, "64M", "Bound on bytes requested but not received.");

namespace ferry {
namespace {

absl::StatusOr<uint64_t> ParseBytes(std::string text) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k':
        scale = uint64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        scale = uint64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        scale = uint64_t{1} << 30;
        break;
      default:
        break;
    }
    if (scale != 1) text.pop_back();
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte count"));
  }
  return value * scale;
}

// Fills `out` with fast pseudo-random bytes (the generator need not be strong; it must
// be cheap enough to make a GiB in seconds and not compress to nothing).
void FillRandom(std::string& out, uint64_t& state) {
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(out.data() + i, &state, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<char>(state >> (8 * (i % 8)));
}

// --app, app-0 when not given.
std::string AppFlag() {
  const std::string app = absl::GetFlag(FLAGS_app);
  return app.empty() ? "app-0" : app;
}

int Gen() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const int apps = absl::GetFlag(FLAGS_apps);
  const int shuffles = absl::GetFlag(FLAGS_shuffles);
  const int maps = absl::GetFlag(FLAGS_maps);
  const int first_map = absl::GetFlag(FLAGS_first_map);
  const int partitions = absl::GetFlag(FLAGS_partitions);
  absl::StatusOr<uint64_t> total = ParseBytes(absl::GetFlag(FLAGS_total_bytes));
  const std::string distribution = absl::GetFlag(FLAGS_distribution);
  const std::string layout = absl::GetFlag(FLAGS_layout);
  const int local_dirs = absl::GetFlag(FLAGS_spark_local_dirs);
  const int subdirs = absl::GetFlag(FLAGS_subdirs);
  if (dir.empty() || apps < 1 || shuffles < 1 || maps < 1 || first_map < 0 ||
      maps > INT32_MAX - first_map || partitions < 1 || !total.ok() ||
      (distribution != "uniform" && distribution != "exponential" && distribution != "fixed") ||
      (layout != "ferry" && layout != "spark") || local_dirs < 1 || local_dirs > 64 ||
      subdirs < 1 || subdirs > 4096) {
    std::fprintf(stderr,
                 "ferry gen: needs --dir, positive counts, a byte size, a known "
                 "--distribution and --layout, 1 to 64 local dirs, 1 to 4096 subdirs\n");
    return 2;
  }
  const std::string named = absl::GetFlag(FLAGS_app);
  if (!named.empty() && apps != 1) {
    std::fprintf(stderr,
                 "ferry gen: --app names one app; with --apps=%d the apps are app-0 .. app-%d\n",
                 apps, apps - 1);
    return 2;
  }
  const bool force = absl::GetFlag(FLAGS_force);
  const double mean =
      static_cast<double>(*total) / (static_cast<double>(apps) * shuffles * maps * partitions);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  uint64_t fill_state = absl::GetFlag(FLAGS_seed) * 0x9e3779b97f4a7c15ull + 1;
  std::uniform_real_distribution<double> uniform(0.5, 1.5);
  std::exponential_distribution<double> exponential(1.0);
  uint64_t written = 0;
  const absl::Time start = absl::Now();
  std::string buffer;
  const auto make_dir = [](const std::string& path) {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      std::perror(path.c_str());
      return false;
    }
    return true;
  };
  if (!make_dir(dir)) return 1;
  for (int a = 0; a < apps; ++a) {
    const std::string app = named.empty() ? absl::StrCat("app-", a) : named;
    const std::string app_dir = absl::StrCat(dir, "/", app);
    std::vector<std::string> executor_dirs;
    if (layout == "ferry") {
      if (!make_dir(app_dir)) return 1;
    } else {
      for (int k = 0; k < local_dirs; ++k) {
        const std::string local = absl::StrCat(dir, "/local", k);
        executor_dirs.push_back(absl::StrCat(local, "/blockmgr-", app));
        if (!make_dir(local) || !make_dir(executor_dirs.back())) return 1;
      }
      std::printf("%s executor 0: --local-dirs=%s --subdirs=%d\n", app.c_str(),
                  absl::StrJoin(executor_dirs, ",").c_str(), subdirs);
    }
    for (int s = 0; s < shuffles; ++s) {
      for (int m = first_map; m < first_map + maps; ++m) {
        // Spark writes ADLER32 checksums unless told otherwise.
        auto writer = layout == "ferry"
                          ? ShuffleWriter::Create(app_dir, s, m)
                          : ShuffleWriter::CreateInSparkLayout(executor_dirs, subdirs, s, m,
                                                               ChecksumAlgorithm::kAdler32);
        if (!writer.ok()) {
          std::fprintf(stderr, "ferry gen: %s\n", writer.status().ToString().c_str());
          return 1;
        }
        // A data set is never changed silently: a map output that is there stays unless
        // asked (a reader would serve old and new maps as one shuffle).
        for (const std::string* path : {&writer->data_path(), &writer->index_path()}) {
          struct stat st;
          if (!force && ::lstat(path->c_str(), &st) == 0) {
            std::fprintf(stderr,
                         "ferry gen: %s exists: map %d of shuffle %d of %s is there already "
                         "(--force writes over it)\n",
                         path->c_str(), m, s, app.c_str());
            return 1;
          }
        }
        for (int r = 0; r < partitions; ++r) {
          const double factor = distribution == "uniform"       ? uniform(rng)
                                : distribution == "exponential" ? exponential(rng)
                                                                : 1.0;
          buffer.resize(static_cast<size_t>(std::llround(mean * factor)));
          FillRandom(buffer, fill_state);
          if (absl::Status st = writer->Write(r, buffer); !st.ok()) {
            std::fprintf(stderr, "ferry gen: %s\n", st.ToString().c_str());
            return 1;
          }
        }
        written += writer->bytes_written();
        if (absl::Status st = writer->Commit(partitions); !st.ok()) {
          std::fprintf(stderr, "ferry gen: %s\n", st.ToString().c_str());
          return 1;
        }
      }
    }
  }
  std::printf(
      "generated %d app(s) x %d shuffle(s) x %d map output(s) x %d partitions, %llu "
      "bytes (%s) in %s under %s\n",
      apps, shuffles, maps, partitions, static_cast<unsigned long long>(written),
      distribution.c_str(), absl::FormatDuration(absl::Now() - start).c_str(), dir.c_str());
  return 0;
}

// Passes each block to `inner` and counts what arrives; on a terminal, redraws one
// progress line on stderr at most five times a second: a bar, bytes, GB/s, time left.
class ProgressSink final : public BlockSink {
 public:
  ProgressSink(BlockSink& inner, uint64_t total_bytes, bool show)
      : inner_(inner), total_(total_bytes), show_(show) {}
  absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset, uint64_t length,
                       BlockVerifier& verifier, const std::string& name,
                       absl::Time deadline) override {
    const uint64_t kept = inner_.Kept(index);
    absl::Status s = inner_.Receive(source, index, offset, length, verifier, name, deadline);
    // Bytes of a block cut off count once it is continued from them; a block refetched
    // from its start (bytes that failed their checksum) counts again.
    if (s.ok()) done_ += length;
    if (!s.ok() && inner_.Kept(index) > kept) done_ += inner_.Kept(index) - kept;
    const absl::Time now = absl::Now();
    if (start_ == absl::InfinitePast()) start_ = now;
    if (show_ && now >= next_print_) {
      next_print_ = now + absl::Milliseconds(200);
      Draw(now);
    }
    return s;
  }
  uint64_t Kept(size_t index) const override { return inner_.Kept(index); }
  void Finish() {
    if (show_) std::fprintf(stderr, "\r%*s\r", kWidth, "");
  }

 private:
  static constexpr int kWidth = 78;
  void Draw(absl::Time now) const {
    constexpr int kBar = 24;
    const double fraction = total_ > 0 ? std::min(1.0, static_cast<double>(done_) / total_) : 1.0;
    const int filled = static_cast<int>(fraction * kBar);
    const double seconds = absl::ToDoubleSeconds(now - start_);
    const double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0;
    std::string eta = "--:--";
    if (rate > 0 && total_ >= done_) {
      const int64_t left = static_cast<int64_t>(static_cast<double>(total_ - done_) / rate);
      eta = absl::StrFormat("%d:%02d", left / 60, left % 60);
    }
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  %s / %s  %.2f GB/s  ETA %s ",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kBar - filled), '.').c_str(), 100 * fraction,
                 HumanBytes(done_).c_str(), HumanBytes(total_).c_str(), rate / 1e9, eta.c_str());
  }
  static std::string HumanBytes(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
      v /= 1024;
      ++u;
    }
    return u == 0 ? absl::StrFormat("%.0f %s", v, units[u])
                  : absl::StrFormat("%.1f %s", v, units[u]);
  }

  BlockSink& inner_;
  uint64_t total_;
  bool show_;
  uint64_t done_ = 0;
  absl::Time start_ = absl::InfinitePast();
  absl::Time next_print_ = absl::InfinitePast();
};

// A protobuf message as JSON in the style of every command's --json: field names as
// the .proto spells them (snake_case), 64-bit integers as numbers, enums by name, every
// field present.
nlohmann::ordered_json ToJson(const google::protobuf::Message& message) {
  namespace pb = google::protobuf;
  const pb::Reflection& reflection = *message.GetReflection();
  const pb::Descriptor& descriptor = *message.GetDescriptor();
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const pb::FieldDescriptor& field = *descriptor.field(i);
    const bool repeated = field.is_repeated();
    const int count = repeated ? reflection.FieldSize(message, &field) : 1;
    nlohmann::ordered_json values = nlohmann::ordered_json::array();
    for (int k = 0; k < count; ++k) {
      switch (field.cpp_type()) {
#define FERRY_JSON_SCALAR(CPPTYPE, Getter)                                         \
  case pb::FieldDescriptor::CPPTYPE:                                               \
    values.push_back(repeated ? reflection.GetRepeated##Getter(message, &field, k) \
                              : reflection.Get##Getter(message, &field));          \
    break;
        FERRY_JSON_SCALAR(CPPTYPE_INT32, Int32)
        FERRY_JSON_SCALAR(CPPTYPE_INT64, Int64)
        FERRY_JSON_SCALAR(CPPTYPE_UINT32, UInt32)
        FERRY_JSON_SCALAR(CPPTYPE_UINT64, UInt64)
        FERRY_JSON_SCALAR(CPPTYPE_DOUBLE, Double)
        FERRY_JSON_SCALAR(CPPTYPE_FLOAT, Float)
        FERRY_JSON_SCALAR(CPPTYPE_BOOL, Bool)
        FERRY_JSON_SCALAR(CPPTYPE_STRING, String)
#undef FERRY_JSON_SCALAR
        case pb::FieldDescriptor::CPPTYPE_ENUM:
          values.push_back(repeated ? reflection.GetRepeatedEnum(message, &field, k)->name()
                                    : reflection.GetEnum(message, &field)->name());
          break;
        case pb::FieldDescriptor::CPPTYPE_MESSAGE:
          values.push_back(ToJson(repeated ? reflection.GetRepeatedMessage(message, &field, k)
                                           : reflection.GetMessage(message, &field)));
          break;
      }
    }
    out[field.name()] = repeated ? std::move(values) : std::move(values[0]);
  }
  return out;
}

// One line of JSON on stdout, for --json.
int PrintJson(const nlohmann::ordered_json& json) {
  // Text from servers and files is printed as it is; invalid UTF-8 is replaced.
  std::printf("%s\n",
              json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  return 0;
}

// "1.5 GiB": bytes for people (powers of 1024, as --total-bytes reads them).
std::string Readable(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

int Fetch(ShuffleClient& client) {
  const std::string server = absl::GetFlag(FLAGS_server);
  const std::vector<std::string> servers = absl::StrSplit(server, ',', absl::SkipEmpty());
  const std::string app = AppFlag();
  const int only_shuffle = absl::GetFlag(FLAGS_shuffle);
  absl::StatusOr<uint64_t> in_flight = ParseBytes(absl::GetFlag(FLAGS_max_in_flight));
  if (!in_flight.ok()) {
    std::fprintf(stderr, "ferry fetch: %s\n", in_flight.status().ToString().c_str());
    return 2;
  }
  if (servers.empty()) {
    std::fprintf(stderr, "ferry fetch: --server names no server\n");
    return 2;
  }
  std::vector<BlockLocation> blocks;
  // (shuffle, map) -> where its blocks start in `blocks`, for a second server that lists
  // the same map output: a replica.
  std::map<std::pair<int32_t, int64_t>, size_t> first_listed;
  // Map outputs a server listed as unreadable, with why (the first server's).
  std::map<std::pair<int32_t, int64_t>, std::string> unreadable;
  uint64_t total = 0;
  // The listings come from the servers: what they say is bounded before it is acted on.
  constexpr int64_t kMaxBlocks = int64_t{1} << 24;
  int64_t listed = 0;
  for (const std::string& at : servers) {
    auto list = client.control().ListShuffles(at, app);
    if (!list.ok()) {
      std::fprintf(stderr, "ferry fetch: %s\n", list.status().ToString().c_str());
      return 1;
    }
    for (const auto& shuffle : list->shuffles()) {
      if (only_shuffle >= 0 && shuffle.shuffle_id() != only_shuffle) continue;
      for (const auto& out : shuffle.map_outputs()) {
        if (!out.error().empty()) {
          // The server cannot read it: another server's copy, if one lists it, serves.
          unreadable.try_emplace({shuffle.shuffle_id(), out.map_id()},
                                 absl::StrCat(at, ": ", out.error().substr(0, 512)));
          continue;
        }
        const int32_t count = absl::GetFlag(FLAGS_batch) ? 1 : out.partitions();
        listed += count;
        if (out.partitions() < 0 || listed > kMaxBlocks) {
          std::fprintf(stderr,
                       "ferry fetch: %s lists more than %lld blocks (or a negative count) for "
                       "app %s; fetch one shuffle at a time (--shuffle)\n",
                       at.c_str(), static_cast<long long>(kMaxBlocks), app.c_str());
          return 1;
        }
        const auto [it, first] =
            first_listed.try_emplace({shuffle.shuffle_id(), out.map_id()}, blocks.size());
        if (!first) {
          for (size_t k = it->second; k < blocks.size() && blocks[k].block.map_id == out.map_id() &&
                                      blocks[k].block.shuffle_id == shuffle.shuffle_id();
               ++k) {
            blocks[k].replicas.push_back(at);
          }
          continue;
        }
        total += out.data_bytes();
        if (absl::GetFlag(FLAGS_batch)) {
          blocks.push_back({at, {shuffle.shuffle_id(), out.map_id(), 0, out.partitions()}});
          continue;
        }
        for (int r = 0; r < out.partitions(); ++r) {
          blocks.push_back({at, {shuffle.shuffle_id(), out.map_id(), r, r + 1}});
        }
      }
    }
  }
  for (const auto& [listed_at, why] : first_listed) unreadable.erase(listed_at);
  if (blocks.empty() && unreadable.empty()) {
    std::fprintf(stderr, "ferry fetch: app %s has no matching shuffle data on %s\n", app.c_str(),
                 server.c_str());
    return 1;
  }
  FetchOptions options;
  options.verify_checksums = absl::GetFlag(FLAGS_verify);
  options.max_bytes_in_flight = *in_flight;
  const std::string to = absl::GetFlag(FLAGS_to);
  DiscardSink discard;
  std::vector<std::string> paths;
  for (const BlockLocation& b : blocks) {
    paths.push_back(absl::StrCat(to, "/shuffle_", b.block.shuffle_id, "_", b.block.map_id, "_",
                                 b.block.start_reduce_id, "-", b.block.end_reduce_id, ".block"));
  }
  FilesSink files(to.empty() ? std::vector<std::string>{} : std::move(paths));
  if (!to.empty() && ::mkdir(to.c_str(), 0755) != 0 && errno != EEXIST) {
    std::perror(to.c_str());
    return 1;
  }
  ProgressSink progress(to.empty() ? static_cast<BlockSink&>(discard) : files, total,
                        ::isatty(STDERR_FILENO) != 0);
  absl::StatusOr<FetchStats> stats = blocks.empty() ? absl::StatusOr<FetchStats>(FetchStats{})
                                                    : client.Fetch(app, blocks, progress, options);
  progress.Finish();
  if (!stats.ok()) {
    std::fprintf(stderr, "ferry fetch: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  // The rest was fetched; a map output no server could read fails the command.
  if (!unreadable.empty()) {
    for (const auto& [key, why] : unreadable) {
      std::fprintf(stderr, "ferry fetch: map %lld of shuffle %d cannot be read: %s\n",
                   static_cast<long long>(key.second), key.first, why.c_str());
    }
    std::fprintf(stderr,
                 "ferry fetch: fetched %llu blocks; %zu map output(s) of app %s cannot be read\n",
                 static_cast<unsigned long long>(stats->blocks), unreadable.size(), app.c_str());
    return 1;
  }
  // The failovers it took, for the operator: each on stderr, their count in the JSON.
  for (const absl::Status& why : stats->retried) {
    std::fprintf(stderr, "ferry fetch: tried again after: %s\n", why.ToString().c_str());
  }
  const double seconds = absl::ToDoubleSeconds(stats->elapsed);
  if (absl::GetFlag(FLAGS_json)) {
    return PrintJson({{"app", app},
                      {"server", server},
                      {"blocks", stats->blocks},
                      {"bytes", stats->bytes},
                      {"seconds", seconds},
                      {"gbps", seconds > 0 ? static_cast<double>(stats->bytes) / seconds / 1e9 : 0},
                      {"verified", options.verify_checksums},
                      {"retried", stats->retried.size()},
                      {"written_to", to}});
  }
  std::printf("fetched %llu blocks, %llu bytes in %.3f s: %.3f GB/s (%s, %s)\n",
              static_cast<unsigned long long>(stats->blocks),
              static_cast<unsigned long long>(stats->bytes), seconds,
              seconds > 0 ? static_cast<double>(stats->bytes) / seconds / 1e9 : 0.0,
              options.verify_checksums ? "checksums verified" : "not verified",
              to.empty() ? "discarded" : absl::StrCat("written under ", to).c_str());
  return 0;
}

// The apps a server has shuffle data for, with their sizes: `ferry ls` without --app.
int LsApps(ShuffleClient& client) {
  auto apps = client.control().ListApps(absl::GetFlag(FLAGS_server));
  if (!apps.ok()) {
    std::fprintf(stderr, "ferry ls: %s\n", apps.status().ToString().c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_json)) return PrintJson(ToJson(*apps));
  std::printf("%-40s %-9s %-12s %s\n", "app", "shuffles", "map outputs", "size");
  for (const ferry::v1::AppSummary& app : apps->apps()) {
    std::printf("%-40s %-9u %-12u %s\n", app.app_id().c_str(), app.shuffles(), app.map_outputs(),
                Readable(app.data_bytes()).c_str());
  }
  if (apps->truncated()) {
    std::printf("(the first %d apps by name; the server has more)\n", apps->apps_size());
  }
  return 0;
}

int Ls(ShuffleClient& client) {
  if (absl::GetFlag(FLAGS_app).empty()) return LsApps(client);
  auto list = client.control().ListShuffles(absl::GetFlag(FLAGS_server), AppFlag());
  if (!list.ok()) {
    std::fprintf(stderr, "ferry ls: %s\n", list.status().ToString().c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_json)) return PrintJson(ToJson(*list));
  std::printf("%-8s %-6s %-11s %-10s %s\n", "shuffle", "maps", "partitions", "size", "checksums");
  for (const auto& s : list->shuffles()) {
    uint64_t bytes = 0;
    int64_t partitions = 0;
    std::string checksums;
    for (const auto& m : s.map_outputs()) {
      bytes += m.data_bytes();
      partitions += m.partitions();
      const std::string name = ferry::v1::ChecksumAlgorithm_Name(m.checksum_algorithm());
      if (checksums.find(name) == std::string::npos) {
        checksums += checksums.empty() ? name : "," + name;
      }
    }
    std::printf("%-8d %-6d %-11lld %-10s %s\n", s.shuffle_id(), s.map_outputs_size(),
                static_cast<long long>(partitions), Readable(bytes).c_str(), checksums.c_str());
  }
  for (const auto& s : list->shuffles()) {
    for (const auto& m : s.map_outputs()) {
      if (m.error().empty()) continue;
      std::printf("shuffle %d map %lld cannot be read: %s\n", s.shuffle_id(),
                  static_cast<long long>(m.map_id()), m.error().substr(0, 512).c_str());
    }
  }
  return 0;
}

int Info(ShuffleClient& client) {
  auto info = client.control().GetServerInfo(absl::GetFlag(FLAGS_server));
  if (!info.ok()) {
    std::fprintf(stderr, "ferry info: %s\n", info.status().ToString().c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_json)) return PrintJson(ToJson(*info));
  std::printf(
      "version       %s\ndata plane    %s:%u\nmode          %s\nio engine     %s\n"
      "threads       %u\npipe bytes    %llu\ncopy buffer   %llu\nticket ttl    %lld ms\n",
      info->version().c_str(),
      info->data_host().empty() ? "(control host)" : info->data_host().c_str(), info->data_port(),
      ferry::v1::DataPlaneMode_Name(info->mode()).c_str(), info->io_engine().c_str(),
      info->data_threads(), static_cast<unsigned long long>(info->pipe_bytes()),
      static_cast<unsigned long long>(info->copy_buffer_bytes()),
      static_cast<long long>(info->ticket_ttl_ms()));
  const auto port_or_off = [](uint32_t port) { return port == 0 ? "off" : absl::StrCat(port); };
  std::printf("spark port    %s\nmetrics port  %s\n", port_or_off(info->spark_port()).c_str(),
              port_or_off(info->metrics_port()).c_str());
  for (const ferry::v1::DiskHealth& disk : info->disks()) {
    std::printf("disk          %s %s: %llu reads, %llu bytes, %llu errors, %llu queued%s%s\n",
                disk.name().c_str(), disk.healthy() ? "healthy" : "UNHEALTHY",
                static_cast<unsigned long long>(disk.reads()),
                static_cast<unsigned long long>(disk.read_bytes()),
                static_cast<unsigned long long>(disk.read_errors()),
                static_cast<unsigned long long>(disk.queued_reads()),
                disk.last_error().empty() ? "" : "; last error: ", disk.last_error().c_str());
  }
  return 0;
}

// gRPC's standard health check: SERVING (exit 0) or not (exit 1). A serving server
// whose disks fail some reads still serves the blocks on its other disks: it is
// SERVING, and the unhealthy disks are listed beside it (from GetServerInfo).
int Health(ShuffleClient& client) {
  const std::string server = absl::GetFlag(FLAGS_server);
  absl::StatusOr<bool> serving = client.control().CheckHealth(server);
  if (!serving.ok()) {
    std::fprintf(stderr, "ferry health: %s\n", serving.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> unhealthy;
  // The health check needs no token; the disks' health does. A probe without the token
  // (a load balancer's, a monitor's) still learns that the server serves.
  bool disks_known = *serving;
  if (*serving) {
    auto info = client.control().GetServerInfo(server);
    if (!info.ok() && info.status().code() == absl::StatusCode::kUnauthenticated &&
        absl::GetFlag(FLAGS_auth_token_file).empty()) {
      disks_known = false;
    } else if (!info.ok()) {
      std::fprintf(stderr, "ferry health: %s\n", info.status().ToString().c_str());
      return 1;
    } else {
      for (const ferry::v1::DiskHealth& disk : info->disks()) {
        if (!disk.healthy()) {
          unhealthy.push_back(absl::StrCat(disk.name(), ": ", disk.last_error()));
        }
      }
    }
  }
  const char* status = *serving ? "SERVING" : "NOT_SERVING";
  if (absl::GetFlag(FLAGS_json)) {
    // [] when every disk is healthy; null when not told (without the token).
    PrintJson({{"server", server},
               {"status", status},
               {"unhealthy_disks",
                disks_known ? nlohmann::ordered_json(unhealthy) : nlohmann::ordered_json()}});
  } else if (*serving && !disks_known) {
    std::printf("%s (disks not checked: the server requires --auth-token-file for that)\n", status);
  } else if (unhealthy.empty()) {
    std::printf("%s\n", status);
  } else {
    std::printf("%s, with unhealthy disks: %s\n", status, absl::StrJoin(unhealthy, "; ").c_str());
  }
  return *serving ? 0 : 1;
}

// Forgets a Spark application's executors on a server (what Spark's worker tells its
// shuffle service when an application ends), optionally deleting their local dirs.
int RemoveApp(ShuffleClient& client) {
  ferry::v1::RemoveSparkAppRequest request;
  request.set_app_id(AppFlag());
  request.set_exec_id(absl::GetFlag(FLAGS_exec_id));
  request.set_delete_local_dirs(absl::GetFlag(FLAGS_delete_local_dirs));
  auto removed = client.control().RemoveSparkApp(absl::GetFlag(FLAGS_server), request);
  if (!removed.ok()) {
    std::fprintf(stderr, "ferry remove-app: %s\n", removed.status().ToString().c_str());
    return 1;
  }
  std::printf("removed %u executor(s) of %s", removed->executors_removed(),
              request.app_id().c_str());
  if (request.delete_local_dirs()) {
    std::printf(", deleted %u local dir(s)", removed->local_dirs_deleted());
  }
  std::printf("\n");
  for (const std::string& kept : removed->kept()) {
    std::printf("kept %s: another registration names it\n", kept.c_str());
  }
  for (const std::string& error : removed->errors()) {
    std::fprintf(stderr, "ferry remove-app: %s\n", error.c_str());
  }
  return removed->errors().empty() ? 0 : 1;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the command-line client of ferry_server: ferry COMMAND [flags]. Exit codes: 0 done, "
      "1 the command failed (one line on stderr says what), 2 bad usage.");
  // The flags every command that reaches a server reads.
  const std::vector<std::string> reach = {"server", "auth-token-file", "tls-ca-file"};
  auto with_reach = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), reach.begin(), reach.end());
    return flags;
  };
  ferry::SetCommands({
      {"gen",
       "write synthetic shuffle data, as Spark's sort shuffle lays it out.",
       "gen --dir=DIR [--app=APP | --apps=N] [--force] [--maps=16 --partitions=64 "
       "--total-bytes=1G ...]",
       {"dir", "app", "apps", "force", "shuffles", "maps", "first-map", "partitions", "total-bytes",
        "distribution", "seed", "layout", "spark-local-dirs", "subdirs"}},
      {"fetch", "fetch every block of an app from one or more servers, verifying checksums.",
       "fetch --server=HOST:PORT[,HOST:PORT...] --app=APP [--shuffle=ID] [--to=DIR] [--json]",
       with_reach({"app", "shuffle", "to", "verify", "batch", "max-in-flight", "json"})},
      {"ls", "list the apps a server has shuffle data for, or one app's shuffles (--app).",
       "ls --server=HOST:PORT [--app=APP] [--json]", with_reach({"app", "json"})},
      {"info", "show a server's version, addresses, settings and disks.",
       "info --server=HOST:PORT [--json]", with_reach({"json"})},
      {"health",
       "exit 0 when the server is SERVING (unhealthy disks listed when the token is given).",
       "health --server=HOST:PORT [--json]", with_reach({"json"})},
      {"remove-app",
       "forget a Spark application's executors on a server (what Spark's worker tells its "
       "shuffle service when an application ends), optionally deleting their local dirs.",
       "remove-app --server=HOST:PORT --app=APP [--exec-id=E] [--delete-local-dirs]",
       with_reach({"app", "exec-id", "delete-local-dirs"})},
  });
  const std::vector<std::string> positional = ferry::ParseFlags(argc, argv);
  if (positional.size() >= 2 && positional[1] == "help" && positional.size() <= 3) {
    ferry::PrintCommandHelp(argv[0], positional.size() == 3 ? positional[2] : "");
  }
  if (positional.size() != 2) {
    std::fprintf(stderr,
                 "usage: ferry COMMAND [flags] (ferry help lists the commands, ferry help "
                 "COMMAND a command's flags)\n");
    return 2;
  }
  const std::string command = positional[1];
  if (command == "gen") return ferry::Gen();
  ferry::ControlClientOptions control;
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    absl::StatusOr<ferry::Secret> read = ferry::ReadAuthToken(path);
    if (!read.ok()) {
      std::fprintf(stderr, "ferry: %s\n", read.status().ToString().c_str());
      return 2;
    }
    control.auth_token = *std::move(read);
  }
  if (const std::string path = absl::GetFlag(FLAGS_tls_ca_file); !path.empty()) {
    absl::StatusOr<ferry::Secret> read = ferry::ReadPemFile(path);
    if (!read.ok()) {
      std::fprintf(stderr, "ferry: %s\n", read.status().ToString().c_str());
      return 2;
    }
    control.tls_root_certs = std::string(read->view());
  }
  ferry::ShuffleClient client(std::move(control));
  if (command == "fetch") return ferry::Fetch(client);
  if (command == "ls") return ferry::Ls(client);
  if (command == "info") return ferry::Info(client);
  if (command == "remove-app") return ferry::RemoveApp(client);
  if (command == "health") return ferry::Health(client);
  ferry::PrintCommandHelp(argv[0], command);  // an unknown command: exit 2, naming it
}
