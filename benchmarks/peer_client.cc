// peer_client: the one receiver the peer comparison (benchmarks/peers) uses for every
// sender, so only the sender differs. It fetches the same file segments either from a
// ferry_server (ShuffleClient, discard sink) or as HTTP/1.1 Range requests (nginx),
// over N connections (one thread each), reading every payload into a buffer and
// dropping it, the same way for both protocols (--reader, --read-bytes). Prints one JSON
// line: bytes, seconds, GB/s, client CPU seconds.
//
//   peer_client --ferry=127.0.0.1:7070 --app=app-0 --connections=4 --rounds=1
//   peer_client --http=127.0.0.1:8080 --dir=DATA --app=app-0 --connections=4
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/shuffle_client.h"
#include "common/flag_names.h"
#include "common/frame_header.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

ABSL_FLAG(std::string, ferry, "", "Control address of a ferry_server to fetch from.");
ABSL_FLAG(std::string, http, "", "host:port of an HTTP server serving <app>/<file> with Range.");
ABSL_FLAG(std::string, app, "app-0", "App whose map outputs to fetch.");
ABSL_FLAG(int, connections, 1, "Parallel connections (one thread each).");
ABSL_FLAG(int, rounds, 1, "Times each connection fetches its share.");
ABSL_FLAG(int64_t, max_in_flight, 64 << 20,
          "Ferry: bytes requested but not received per connection (1 = one block at a time, "
          "request/response like HTTP/1.1 without pipelining).");
ABSL_FLAG(bool, raw, false,
          "Ferry without the client library: a plain blocking socket read exactly like "
          "the HTTP path, one FETCH for the connection's whole share (or, with "
          "--max-in-flight=1, one per block per round trip).");
ABSL_FLAG(std::string, reader, "stream",
          "How responses are read, the same for every protocol. stream: reads of up to "
          "--read-bytes into one buffer, heads parsed out of it and payload skipped, as a "
          "buffered reader (Netty's frame decoder) does. exact: each head read on its own "
          "(HTTP's found with MSG_PEEK), then the payload with reads of up to --read-bytes "
          "into the start of the buffer.");
ABSL_FLAG(int64_t, read_bytes, 1 << 20,
          "Most bytes one recv asks for (Spark's Netty asks for at most 64 KiB).");
ABSL_FLAG(int, buffer_shift, 0,
          "Where the receive buffer starts past a page boundary. malloc puts a large "
          "buffer 16 bytes past one, which for page-aligned blocks read on their own "
          "costs 3x per byte on some CPUs (results/receiver.md).");
ABSL_FLAG(bool, batch, false,
          "Fetch each map output as one segment instead of one block per partition.");
ABSL_FLAG(absl::Duration, probe, absl::ZeroDuration(),
          "Latency probe: for this long, one connection fetches the app's blocks one per "
          "round trip, over and over (Ferry's wire protocol, as --raw --max-in-flight=1), "
          "and prints each round trip's p50, p99 and max.");

namespace ferry {
namespace {

struct Segment {
  std::string file;  // data file name, for HTTP
  BlockId id;
  uint64_t offset = 0;
  uint64_t length = 0;
};

double ProcessCpuSeconds() {
  rusage r;
  ::getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

// Every block of the app, with its byte range, from the server's own listing.
absl::StatusOr<std::vector<Segment>> ListSegments(ShuffleClient& client, const std::string& server,
                                                  const std::string& app, bool batch) {
  auto list = client.control().ListShuffles(server, app);
  if (!list.ok()) return list.status();
  std::vector<BlockId> ids;
  for (const auto& s : list->shuffles()) {
    for (const auto& m : s.map_outputs()) {
      if (batch) {
        ids.push_back({s.shuffle_id(), m.map_id(), 0, m.partitions()});
        continue;
      }
      for (int r = 0; r < m.partitions(); ++r)
        ids.push_back({s.shuffle_id(), m.map_id(), r, r + 1});
    }
  }
  // One OpenStream resolves every block's length; offsets follow from the order.
  auto handle = client.control().OpenStream(server, app, ids);
  if (!handle.ok()) return handle.status();
  std::vector<Segment> segments;
  uint64_t offset = 0;
  int64_t map = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].map_id != map || ids[i].start_reduce_id == 0) offset = 0;
    map = ids[i].map_id;
    Segment s;
    s.id = ids[i];
    s.file = absl::StrCat("shuffle_", ids[i].shuffle_id, "_", ids[i].map_id, "_0.data");
    s.offset = offset;
    s.length = handle->blocks(static_cast<int>(i)).length();
    offset += s.length;
    segments.push_back(s);
  }
  (void)client.control().CloseStream(server, handle->ticket());
  return segments;
}

UniqueFd Dial(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  uint32_t port = 0;
  (void)absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &addr.sin_addr);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) fd.Reset();
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// The receive loop every sender is read by (--reader, --read-bytes).
class Reader {
 public:
  Reader(int fd, bool exact, size_t read_bytes, size_t shift)
      : fd_(fd),
        exact_(exact),
        read_bytes_(read_bytes),
        storage_(AllocatePages(read_bytes + shift)),
        buf_(static_cast<char*>(storage_.get()) + shift) {}

  // Exactly `n` bytes of head into `out`.
  bool ReadHead(char* out, size_t n) {
    while (n > 0) {
      if (exact_) {
        const ssize_t got = Recv(out, n, 0);
        if (got <= 0) return false;
        out += got;
        n -= static_cast<size_t>(got);
        continue;
      }
      if (begin_ == end_ && !Fill()) return false;
      const size_t take = std::min(n, end_ - begin_);
      std::memcpy(out, buf_ + begin_, take);
      begin_ += take;
      out += take;
      n -= take;
    }
    return true;
  }

  // An HTTP response head, up to and including its blank line.
  bool ReadHttpHead(std::string* head) {
    head->clear();
    const size_t peek_limit = std::min<size_t>(read_bytes_, 65536);
    size_t peek_want = 1;  // exact: wait for more than was seen last time
    for (int i = 0; i < 100000; ++i) {
      size_t end;
      if (exact_) {
        // Find the head's end without taking payload bytes, then take the head alone.
        const ssize_t got = Recv(buf_, peek_want, MSG_PEEK | MSG_WAITALL);
        if (got <= 0) return false;
        const absl::string_view seen(buf_, static_cast<size_t>(got));
        if ((end = seen.find("\r\n\r\n")) == absl::string_view::npos) {
          if (static_cast<size_t>(got) >= peek_limit) return false;
          peek_want = std::min(peek_limit, static_cast<size_t>(got) + 1);
          continue;
        }
        head->resize(end + 4);
        return ReadHead(head->data(), head->size());
      }
      if (begin_ == end_ && !Fill()) return false;
      head->append(buf_ + begin_, end_ - begin_);
      if ((end = head->find("\r\n\r\n")) != std::string::npos) {
        // What follows the head stays buffered for the payload.
        begin_ = end_ - (head->size() - end - 4);
        head->resize(end + 4);
        return true;
      }
      begin_ = end_;
      if (head->size() > 65536) return false;
    }
    return false;
  }

  // Reads and drops `n` bytes of payload.
  bool Skip(uint64_t n) {
    const size_t buffered = static_cast<size_t>(std::min<uint64_t>(n, end_ - begin_));
    begin_ += buffered;
    n -= buffered;
    while (n > 0) {
      if (exact_) {
        const ssize_t got = Recv(buf_, static_cast<size_t>(std::min<uint64_t>(read_bytes_, n)), 0);
        if (got <= 0) return false;
        n -= static_cast<uint64_t>(got);
        continue;
      }
      if (!Fill()) return false;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, end_));
      begin_ = take;
      n -= take;
    }
    return true;
  }

 private:
  ssize_t Recv(char* p, size_t n, int flags) {
    for (;;) {
      const ssize_t got = ::recv(fd_, p, n, flags);
      if (got < 0 && errno == EINTR) continue;
      return got;
    }
  }
  // Replaces the (consumed) buffer with one read of up to read_bytes_.
  bool Fill() {
    const ssize_t got = Recv(buf_, read_bytes_, 0);
    if (got <= 0) return false;
    begin_ = 0;
    end_ = static_cast<size_t>(got);
    return true;
  }

  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  static std::unique_ptr<void, Free> AllocatePages(size_t bytes) {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, bytes) != 0) std::abort();
    return std::unique_ptr<void, Free>(p);
  }

  const int fd_;
  const bool exact_;
  const size_t read_bytes_;
  std::unique_ptr<void, Free> storage_;
  char* const buf_;
  size_t begin_ = 0;  // unread bytes are buf_[begin_, end_)
  size_t end_ = 0;
};

Reader MakeReader(int fd) {
  return Reader(fd, absl::GetFlag(FLAGS_reader) == "exact",
                static_cast<size_t>(
                    std::clamp<int64_t>(absl::GetFlag(FLAGS_read_bytes), 4096, int64_t{64} << 20)),
                static_cast<size_t>(std::clamp(absl::GetFlag(FLAGS_buffer_shift), 0, 4095)));
}

// One keep-alive connection; GETs each segment with a Range header.
absl::Status FetchHttp(const std::string& address, const std::string& app,
                       const std::vector<Segment>& segments) {
  UniqueFd fd = Dial(address);
  if (!fd.valid()) return absl::UnavailableError(absl::StrCat("connect ", address));
  Reader reader = MakeReader(fd.get());
  std::string head;
  for (const Segment& s : segments) {
    if (s.length == 0) continue;
    const std::string request =
        absl::StrCat("GET /", app, "/", s.file, " HTTP/1.1\r\nHost: x\r\nRange: bytes=", s.offset,
                     "-", s.offset + s.length - 1, "\r\n\r\n");
    if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      return absl::UnavailableError("send request");
    }
    if (!reader.ReadHttpHead(&head)) return absl::UnavailableError("response head");
    if (head.compare(0, 12, "HTTP/1.1 206") != 0) {
      return absl::InternalError(absl::StrCat("HTTP answer: ", head.substr(0, head.find('\r'))));
    }
    if (!reader.Skip(s.length)) return absl::UnavailableError("response body");
  }
  return absl::OkStatus();
}

// A stream of Ferry's data plane over a plain blocking socket: the blocks of `segments`
// opened at `server`, its FETCH requests sent from here.
struct RawStream {
  UniqueFd fd;
  FetchRequest request;
  std::string ticket;
};

absl::StatusOr<RawStream> OpenRawStream(ShuffleClient& client, const std::string& server,
                                        const std::string& app,
                                        const std::vector<Segment>& segments) {
  std::vector<BlockId> ids;
  for (const Segment& s : segments) ids.push_back(s.id);
  auto handle = client.control().OpenStream(server, app, ids);
  if (!handle.ok()) return handle.status();
  RawStream stream;
  stream.fd = Dial(absl::StrCat(server.substr(0, server.rfind(':')), ":", handle->data_port()));
  if (!stream.fd.valid()) return absl::UnavailableError("connect to the data plane");
  stream.ticket = handle->ticket();
  std::memcpy(stream.request.ticket.data(), stream.ticket.data(), stream.request.ticket.size());
  return stream;
}

absl::Status SendFetch(RawStream& stream, size_t first, size_t count) {
  stream.request.first_block = static_cast<uint32_t>(first);
  stream.request.block_count = static_cast<uint32_t>(count);
  char frame[kRequestBytes];
  EncodeFetchRequest(stream.request, frame);
  if (::send(stream.fd.get(), frame, sizeof(frame), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof(frame))) {
    return absl::UnavailableError("send request");
  }
  return absl::OkStatus();
}

// Block `index`'s header, checked against `length`, and its payload drained.
absl::Status ReadBlock(Reader& reader, size_t index, uint64_t length) {
  char bytes[kResponseHeaderBytes];
  if (!reader.ReadHead(bytes, sizeof(bytes))) return absl::UnavailableError("response header");
  auto header = DecodeResponseHeader(absl::string_view(bytes, sizeof(bytes)));
  if (!header.ok()) return header.status();
  if (header->kind != FrameKind::kBlock || header->block_index != index ||
      header->length != length) {
    return absl::InternalError(absl::StrCat(
        "unexpected header for block ", index, ": kind ", static_cast<int>(header->kind), " index ",
        header->block_index, " length ", header->length, " status ", header->status));
  }
  if (!reader.Skip(header->length)) return absl::UnavailableError("block payload");
  return absl::OkStatus();
}

// Ferry's data plane read by the same Reader as FetchHttp reads nginx: one stream for
// the share; one FETCH for all its blocks, or with `one_per_round_trip` one FETCH per
// block, each sent after the previous block arrived (request/response, like HTTP/1.1
// without pipelining). Every header is checked and every payload drained into a 1 MiB
// buffer.
absl::Status FetchRaw(ShuffleClient& client, const std::string& server, const std::string& app,
                      const std::vector<Segment>& segments, bool one_per_round_trip) {
  absl::StatusOr<RawStream> stream = OpenRawStream(client, server, app, segments);
  if (!stream.ok()) return stream.status();
  if (!one_per_round_trip) FERRY_RETURN_IF_ERROR(SendFetch(*stream, 0, segments.size()));
  Reader reader = MakeReader(stream->fd.get());
  for (size_t i = 0; i < segments.size(); ++i) {
    if (one_per_round_trip) FERRY_RETURN_IF_ERROR(SendFetch(*stream, i, 1));
    FERRY_RETURN_IF_ERROR(ReadBlock(reader, i, segments[i].length));
  }
  (void)client.control().CloseStream(server, stream->ticket);
  return absl::OkStatus();
}

// --probe: round trips of one block each on one connection for `duration`; every
// round trip's time in microseconds into *micros.
absl::Status Probe(ShuffleClient& client, const std::string& server, const std::string& app,
                   const std::vector<Segment>& segments, absl::Duration duration,
                   std::vector<double>* micros) {
  absl::StatusOr<RawStream> stream = OpenRawStream(client, server, app, segments);
  if (!stream.ok()) return stream.status();
  Reader reader = MakeReader(stream->fd.get());
  const absl::Time end = absl::Now() + duration;
  for (size_t i = 0; absl::Now() < end; i = (i + 1) % segments.size()) {
    const absl::Time start = absl::Now();
    FERRY_RETURN_IF_ERROR(SendFetch(*stream, i, 1));
    FERRY_RETURN_IF_ERROR(ReadBlock(reader, i, segments[i].length));
    micros->push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  (void)client.control().CloseStream(server, stream->ticket);
  return absl::OkStatus();
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

int Main() {
  const std::string ferry = absl::GetFlag(FLAGS_ferry);
  const std::string http = absl::GetFlag(FLAGS_http);
  const std::string app = absl::GetFlag(FLAGS_app);
  const int connections = std::max(1, absl::GetFlag(FLAGS_connections));
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  ShuffleClient client;
  // The listing always comes from Ferry's control plane: both peers serve the same files.
  auto segments = ListSegments(client, ferry, app, absl::GetFlag(FLAGS_batch));
  if (!segments.ok()) {
    std::fprintf(stderr, "peer_client: %s\n", segments.status().ToString().c_str());
    return 1;
  }
  if (const absl::Duration probe = absl::GetFlag(FLAGS_probe); probe > absl::ZeroDuration()) {
    std::vector<double> micros;
    const absl::Status probed = Probe(client, ferry, app, *segments, probe, &micros);
    if (!probed.ok() || micros.empty()) {
      std::fprintf(stderr, "peer_client: %s\n", probed.ToString().c_str());
      return 1;
    }
    std::printf("{\"round_trips\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f}\n",
                micros.size(), Percentile(micros, 0.5), Percentile(micros, 0.99),
                *std::max_element(micros.begin(), micros.end()));
    return 0;
  }
  std::vector<std::vector<Segment>> shares(static_cast<size_t>(connections));
  uint64_t bytes = 0;
  for (size_t i = 0; i < segments->size(); ++i) {
    shares[i % shares.size()].push_back((*segments)[i]);
    bytes += (*segments)[i].length;
  }
  bytes *= static_cast<uint64_t>(rounds);
  std::vector<absl::Status> results(shares.size());
  const double cpu0 = ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (size_t c = 0; c < shares.size(); ++c) {
    threads.emplace_back([&, c] {
      ShuffleClient own;
      FetchOptions options;
      options.verify_checksums = false;
      options.max_bytes_in_flight =
          static_cast<uint64_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_max_in_flight)));
      std::vector<BlockLocation> blocks;
      for (const Segment& s : shares[c]) blocks.push_back({ferry, s.id});
      for (int r = 0; r < rounds && results[c].ok(); ++r) {
        if (absl::GetFlag(FLAGS_raw) && http.empty()) {
          // A budget of one byte means one request per round trip, as for HTTP.
          results[c] =
              FetchRaw(own, ferry, app, shares[c], absl::GetFlag(FLAGS_max_in_flight) <= 1);
        } else if (http.empty()) {
          DiscardSink sink;
          results[c] = own.Fetch(app, blocks, sink, options).status();
        } else {
          results[c] = FetchHttp(http, app, shares[c]);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = ProcessCpuSeconds() - cpu0;
  for (const absl::Status& s : results) {
    if (!s.ok()) {
      std::fprintf(stderr, "peer_client: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const uint64_t blocks = segments->size() * static_cast<uint64_t>(rounds);
  std::printf(
      "{\"bytes\": %llu, \"blocks\": %llu, \"seconds\": %.6f, \"gbps\": %.4f, "
      "\"blocks_per_s\": %.1f, \"client_cpu_s\": %.4f}\n",
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(blocks), seconds,
      static_cast<double>(bytes) / seconds / 1e9, static_cast<double>(blocks) / seconds, cpu);
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::ParseFlags(argc, argv);
  return ferry::Main();
}
