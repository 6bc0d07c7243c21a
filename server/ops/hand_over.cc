#include "server/ops/hand_over.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/pread_full.h"
#include "common/version.h"
#include "glog/logging.h"

namespace ferry {

namespace {

// Each message is one line of text with at most a handful of descriptors: the
// listeners, or one connection.
constexpr size_t kMaxMessageBytes = 512;
constexpr size_t kMaxDescriptors = 8;
static_assert(HandedConnection::kMaxStateBytes + 64 <= kMaxMessageBytes);
// Connections taken in one hand-over: more than any descriptor limit allows.
constexpr size_t kMaxConnections = size_t{1} << 20;
// The open streams' text: 4 Mi blocks (the registry's default bound) at about 30 bytes.
constexpr size_t kMaxStreamsBytes = size_t{1} << 30;
// A peer that connected says what it wants at once.
constexpr int kRequestTimeoutMs = 5000;

// A socket's address for `path`. A path longer than sun_path allows is reached through
// its dir's descriptor (/proc/self/fd/N/name), which the kernel resolves as the path.
struct SocketPath {
  UniqueFd dir;
  sockaddr_un address{};
};
absl::StatusOr<SocketPath> AddressOf(const std::string& path) {
  SocketPath out;
  out.address.sun_family = AF_UNIX;
  std::string name = path;
  if (path.size() >= sizeof(out.address.sun_path)) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) {
      return absl::InvalidArgumentError(absl::StrCat("hand-over socket '", path, "': too long"));
    }
    out.dir = UniqueFd(::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!out.dir.valid()) {
      return absl::ErrnoToStatus(errno, absl::StrCat("open the dir of ", path));
    }
    name = absl::StrCat("/proc/self/fd/", out.dir.get(), path.substr(slash));
  }
  if (name.empty() || name.size() >= sizeof(out.address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hand-over socket '", path, "': its name is too long"));
  }
  std::memcpy(out.address.sun_path, name.data(), name.size());
  return out;
}

// The peer's credentials, from the kernel (not from anything the peer says).
absl::StatusOr<ucred> PeerOf(int fd) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    return absl::ErrnoToStatus(errno, "SO_PEERCRED");
  }
  return peer;
}

absl::Status SendText(int fd, const std::string& text, const std::vector<int>& fds = {}) {
  iovec data{const_cast<char*>(text.data()), text.size()};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptors)] = {};
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  if (::sendmsg(fd, &message, MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    return absl::ErrnoToStatus(errno, "send on the hand-over socket");
  }
  return absl::OkStatus();
}

struct Received {
  std::string text;  // empty at EOF
  std::vector<UniqueFd> fds;
};

// One message within `timeout_ms` (-1: none), or `wake` readable first (CANCELLED).
absl::StatusOr<Received> ReceiveText(int fd, int timeout_ms, int wake = -1) {
  pollfd ready[2] = {{fd, POLLIN, 0}, {wake, POLLIN, 0}};
  const int n = ::poll(ready, wake >= 0 ? 2 : 1, timeout_ms);
  if (n < 0) return absl::ErrnoToStatus(errno, "poll the hand-over socket");
  if (wake >= 0 && (ready[1].revents & POLLIN)) return absl::CancelledError("stopping");
  if (n == 0) return absl::DeadlineExceededError("no answer");
  char text[kMaxMessageBytes];
  iovec data{text, sizeof(text)};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptors)] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t got = ::recvmsg(fd, &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (got < 0) return absl::ErrnoToStatus(errno, "receive on the hand-over socket");
  Received out;
  // Descriptors are owned at once, so that every path below closes them.
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed = -1;
      std::memcpy(&passed, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      out.fds.emplace_back(passed);
    }
  }
  if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return absl::InvalidArgumentError("a hand-over message too long");
  }
  out.text.assign(text, static_cast<size_t>(got));
  return out;
}

// A TCP socket (a stream one: loopback tests use TCP too), listening or connected.
bool IsStream(int fd, bool listening) {
  int accepting = 0;
  int type = 0;
  socklen_t size = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) != 0) return false;
  size = sizeof(int);
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) == 0 &&
         (accepting == 1) == listening && type == SOCK_STREAM;
}

// What follows the listeners: one connection a message, the streams (a memfd), and
// "end <count>"; into *handed.
absl::Status ReceiveConnectionsAndStreams(int fd, const std::string& from, HandedSockets* handed) {
  for (;;) {
    absl::StatusOr<Received> next = ReceiveText(fd, kRequestTimeoutMs);
    if (!next.ok() || next->text.empty()) {
      return absl::Status(next.ok() ? absl::StatusCode::kUnavailable : next.status().code(),
                          absl::StrCat(from, " stopped handing over its connections",
                                       next.ok() ? "" : ": ", next.status().message()));
    }
    absl::string_view text = next->text;
    if (absl::ConsumePrefix(&text, "streams ")) {
      size_t bytes = 0;
      struct stat st {};
      if (!absl::SimpleAtoi(text, &bytes) || bytes > kMaxStreamsBytes || next->fds.size() != 1 ||
          ::fstat(next->fds[0].get(), &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<size_t>(st.st_size) != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(from, " sent streams that are not ones"));
      }
      handed->streams.resize(bytes);
      if (PreadFull(next->fds[0].get(), handed->streams.data(), bytes, 0) !=
          static_cast<ssize_t>(bytes)) {
        return absl::ErrnoToStatus(errno, absl::StrCat("read the streams ", from, " sent"));
      }
      continue;
    }
    if (absl::ConsumePrefix(&text, "end ")) {
      size_t count = 0;
      if (!absl::SimpleAtoi(text, &count) || count != handed->connections.size()) {
        return absl::InvalidArgumentError(absl::StrCat(from, " said '", next->text, "' after ",
                                                       handed->connections.size(), " connections"));
      }
      return absl::OkStatus();
    }
    const std::vector<absl::string_view> words = absl::StrSplit(text, absl::MaxSplits(' ', 2));
    if (words.size() != 3 || words[0] != "connection" || words[1].empty() ||
        next->fds.size() != 1 || !IsStream(next->fds[0].get(), /*listening=*/false) ||
        words[2].size() > HandedConnection::kMaxStateBytes ||
        handed->connections.size() >= kMaxConnections) {
      return absl::InvalidArgumentError(absl::StrCat(from, " sent a connection that is not one: '",
                                                     absl::CHexEscape(next->text.substr(0, 80)),
                                                     "' with ", next->fds.size(), " descriptors"));
    }
    handed->connections.push_back(HandedConnection{.plane = std::string(words[1]),
                                                   .socket = std::move(next->fds[0]),
                                                   .state = std::string(words[2])});
  }
}

}  // namespace

UniqueFd HandedSockets::Take(const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return std::move(fds[i]);
  }
  return UniqueFd();
}

absl::StatusOr<std::unique_ptr<HandOverPoint>> HandOverPoint::Listen(Options options,
                                                                     Prepare prepare,
                                                                     Outcome outcome) {
  absl::StatusOr<SocketPath> socket_path = AddressOf(options.path);
  if (!socket_path.ok()) return socket_path.status();
  const sockaddr_un* address = &socket_path->address;
  std::unique_ptr<HandOverPoint> point(new HandOverPoint(std::move(options)));
  const std::string& path = point->options_.path;
  point->prepare_ = std::move(prepare);
  point->outcome_ = std::move(outcome);
  point->listener_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!point->listener_.valid()) return absl::ErrnoToStatus(errno, "hand-over socket");
  if (point->options_.replace && ::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("remove ", path));
  }
  const auto bind = [&] {
    return ::bind(point->listener_.get(), reinterpret_cast<const sockaddr*>(address),
                  sizeof(*address));
  };
  if (bind() != 0) {
    if (errno != EADDRINUSE) return absl::ErrnoToStatus(errno, absl::StrCat("bind ", path));
    // A server that answers there is alive; a file no one answers on is left by one that
    // was killed.
    UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(address), sizeof(*address)) == 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("another ferry_server runs with this state dir (it answers on ", path,
                       "); start this one with --take-over to take its place"));
    }
    if (errno != ECONNREFUSED || ::unlink(path.c_str()) != 0 || bind() != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("bind ", path));
    }
  }
  struct stat bound {};
  if (::chmod(path.c_str(), 0600) != 0 || ::stat(path.c_str(), &bound) != 0 ||
      ::listen(point->listener_.get(), 8) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("listen on ", path));
  }
  point->inode_ = bound.st_ino;
  point->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!point->wake_.valid()) return absl::ErrnoToStatus(errno, "eventfd");
  point->thread_ = std::thread([p = point.get()] { p->Run(); });
  return point;
}

void HandOverPoint::Run() {
  for (;;) {
    pollfd ready[2] = {{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    if (::poll(ready, 2, -1) < 0) continue;  // EINTR
    if (ready[0].revents & POLLIN) return;   // stopping (the eventfd is never read)
    if ((ready[1].revents & POLLIN) == 0) continue;
    UniqueFd peer(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (peer.valid()) Answer(std::move(peer));
  }
}

void HandOverPoint::Answer(UniqueFd peer) {
  const auto refuse = [&](const std::string& why) {
    (void)SendText(peer.get(), absl::StrCat("refused: ", why));
    if (uint64_t held_back = 0; log_budget_.Take(absl::Now(), &held_back)) {
      LOG(WARNING) << "ferry_server: a hand-over on " << options_.path << " refused: " << why
                   << (held_back > 0 ? absl::StrCat(" (", held_back, " more held back)") : "");
    }
  };
  absl::StatusOr<ucred> who = PeerOf(peer.get());
  if (!who.ok()) return;
  if (who->uid != ::geteuid()) {
    return refuse(absl::StrCat("pid ", who->pid, " runs as uid ", who->uid,
                               "; only this server's user (uid ", ::geteuid(),
                               ") may take over from it"));
  }
  absl::StatusOr<Received> request = ReceiveText(peer.get(), kRequestTimeoutMs);
  if (!request.ok() || request->text.empty()) return;  // gone, or silent
  const std::vector<absl::string_view> words = absl::StrSplit(request->text, ' ');
  if (words.size() != 3 || words[0] != "take-over") {
    return refuse(absl::StrCat("pid ", who->pid, " asked for something else"));
  }
  absl::MutexLock lock(&mu_);
  if (busy_with_ != 0) {
    return refuse(absl::StrCat(
        handed_over_ ? "this server has handed over to pid " : "a hand-over is under way to pid ",
        busy_with_));
  }
  busy_with_ = who->pid;
  if (hand_over_.joinable()) hand_over_.join();  // an earlier one that failed: done
  LOG(INFO) << "ferry_server: pid " << who->pid << " (ferry_server " << words[1]
            << ") takes over; stopping to accept";
  hand_over_ = std::thread(
      [this, p = std::move(peer), pid = who->pid]() mutable { HandOver(std::move(p), pid); });
}

void HandOverPoint::HandOver(UniqueFd peer, pid_t pid) {
  const auto failed = [&](const std::string& why) {
    outcome_(false, why);
    absl::MutexLock lock(&mu_);
    busy_with_ = 0;
  };
  absl::StatusOr<HandedSockets> listeners = prepare_();
  if (!listeners.ok()) {
    (void)SendText(peer.get(), absl::StrCat("refused: ", listeners.status().message()));
    return failed(std::string(listeners.status().message()));
  }
  std::vector<int> fds;
  for (const UniqueFd& fd : listeners->fds) fds.push_back(fd.get());
  if (absl::Status sent = SendText(
          peer.get(), absl::StrCat("listeners ", absl::StrJoin(listeners->names, " ")), fds);
      !sent.ok()) {
    return failed(absl::StrCat("the new server (pid ", pid, ") went: ", sent.message()));
  }
  listeners->fds.clear();  // this server keeps its own copies until it stops
  for (const HandedConnection& c : listeners->connections) {
    if (absl::Status sent = SendText(peer.get(), absl::StrCat("connection ", c.plane, " ", c.state),
                                     {c.socket.get()});
        !sent.ok()) {
      return failed(absl::StrCat("the new server (pid ", pid, ") went: ", sent.message()));
    }
  }
  if (!listeners->streams.empty()) {
    // In a memfd: the text may be far larger than a message.
    UniqueFd streams(::memfd_create("ferry-streams", MFD_CLOEXEC));
    if (!streams.valid() ||
        PwriteFull(streams.get(), listeners->streams.data(), listeners->streams.size(), 0) !=
            static_cast<ssize_t>(listeners->streams.size())) {
      LOG(WARNING) << "ferry_server: handing over without the open streams: "
                   << absl::ErrnoToStatus(errno, "memfd");
    } else if (absl::Status sent =
                   SendText(peer.get(), absl::StrCat("streams ", listeners->streams.size()),
                            {streams.get()});
               !sent.ok()) {
      return failed(absl::StrCat("the new server (pid ", pid, ") went: ", sent.message()));
    }
  }
  if (absl::Status sent = SendText(peer.get(), absl::StrCat("end ", listeners->connections.size()));
      !sent.ok()) {
    return failed(absl::StrCat("the new server (pid ", pid, ") went: ", sent.message()));
  }
  listeners->connections.clear();
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(options_.start_timeout));
  absl::StatusOr<Received> answer = ReceiveText(peer.get(), timeout_ms, wake_.get());
  if (answer.ok() && answer->text == "serving") {
    {
      absl::MutexLock lock(&mu_);
      handed_over_ = true;
    }
    return outcome_(true, "");
  }
  if (absl::IsCancelled(answer.status())) return;  // this server stops: nothing to resume
  return failed(absl::StrCat(
      "the new server (pid ", pid, ") ",
      !answer.ok() && absl::IsDeadlineExceeded(answer.status())
          ? absl::StrCat("did not serve within ", absl::FormatDuration(options_.start_timeout))
          : "ended before it served"));
}

HandOverPoint::~HandOverPoint() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) < 0) {
    // EAGAIN only: a wake-up is pending anyway.
  }
  if (thread_.joinable()) thread_.join();
  if (hand_over_.joinable()) hand_over_.join();
  // Only the file this point bound: a new server's, bound in its place, stays.
  struct stat now {};
  if (::stat(options_.path.c_str(), &now) == 0 && now.st_ino == inode_) {
    ::unlink(options_.path.c_str());
  }
}

absl::StatusOr<std::optional<TakenOver>> TakeOver(const std::string& path, absl::Duration timeout) {
  absl::StatusOr<SocketPath> socket_path = AddressOf(path);
  if (!socket_path.ok()) return socket_path.status();
  const sockaddr_un* address = &socket_path->address;
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "hand-over socket");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(address), sizeof(*address)) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) return std::nullopt;
    return absl::ErrnoToStatus(errno, absl::StrCat("connect to ", path));
  }
  absl::StatusOr<ucred> old = PeerOf(fd.get());
  if (!old.ok()) return old.status();
  if (old->uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("the server on ", path, " (pid ", old->pid,
                                                    ") runs as uid ", old->uid, ", not as uid ",
                                                    ::geteuid(), ": not taken over"));
  }
  if (absl::Status sent =
          SendText(fd.get(), absl::StrCat("take-over ", kFerryVersion, " ", ::getpid()));
      !sent.ok()) {
    return sent;
  }
  absl::StatusOr<Received> answer =
      ReceiveText(fd.get(), static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  const std::string from = absl::StrCat("the server on ", path, " (pid ", old->pid, ")");
  if (!answer.ok()) {
    return absl::Status(answer.status().code(), absl::StrCat(from, " did not hand over within ",
                                                             absl::FormatDuration(timeout), ": ",
                                                             answer.status().message()));
  }
  if (answer->text.empty()) return absl::UnavailableError(absl::StrCat(from, " went"));
  if (absl::StartsWith(answer->text, "refused: ")) {
    return absl::FailedPreconditionError(absl::StrCat(from, " refused: ", answer->text.substr(9)));
  }
  absl::string_view names = answer->text;
  if (!absl::ConsumePrefix(&names, "listeners ")) {
    return absl::InvalidArgumentError(absl::StrCat(from, " answered '", answer->text, "'"));
  }
  TakenOver taken;
  taken.listeners.names = absl::StrSplit(names, ' ', absl::SkipEmpty());
  if (taken.listeners.names.size() != answer->fds.size()) {
    return absl::InvalidArgumentError(absl::StrCat(from, " named ", taken.listeners.names.size(),
                                                   " listeners and sent ", answer->fds.size()));
  }
  for (const UniqueFd& listener : answer->fds) {
    if (!IsStream(listener.get(), /*listening=*/true)) {
      return absl::InvalidArgumentError(absl::StrCat(from,
                                                     " sent a descriptor that is not a "
                                                     "listening TCP socket"));
    }
  }
  taken.listeners.fds = std::move(answer->fds);
  // Then its connections, one a message, and how many it sent.
  if (absl::Status rest = ReceiveConnectionsAndStreams(fd.get(), from, &taken.listeners);
      !rest.ok()) {
    return rest;
  }
  taken.from = old->pid;
  taken.channel = std::move(fd);
  return taken;
}

absl::Status Served(TakenOver& taken) { return SendText(taken.channel.get(), "serving"); }

}  // namespace ferry
