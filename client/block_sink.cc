#include "client/block_sink.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/io/ops.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace ferry {

namespace {

constexpr size_t kScratchBytes = size_t{1} << 20;

// While a large payload streams in, the socket's receive low-water mark (SO_RCVLOWAT)
// is raised so that a receive waiting on an empty socket wakes once this many bytes are
// queued rather than at every TCP segment: waking a parked fiber's thread is what the
// receive path spent most on (benchmarks/results/client-receive.md measures
// it). The mark never exceeds the bytes
// still due in the current block, so a wait can always be satisfied (and a closed or
// reset connection wakes it regardless). It drops back to 1 for a block's last
// kLowWaterBytes, so the next header is read with the default and a block costs at most
// two setsockopt calls; blocks under twice the mark are left alone, since for them the
// calls would cost more than the wake-ups they save.
constexpr uint64_t kLowWaterBytes = uint64_t{256} << 10;

class LowWaterMark {
 public:
  LowWaterMark(int socket, uint64_t length)
      : socket_(socket), active_(length >= 2 * kLowWaterBytes) {}
  LowWaterMark(const LowWaterMark&) = delete;
  LowWaterMark& operator=(const LowWaterMark&) = delete;
  ~LowWaterMark() { Set(1); }

  // Call before each receive with the bytes the block still owes.
  void Before(uint64_t remaining) {
    if (active_) Set(remaining >= kLowWaterBytes ? static_cast<int>(kLowWaterBytes) : 1);
  }

 private:
  void Set(int bytes) {
    if (bytes == mark_) return;
    // A failure only costs the optimisation: the mark stays where it was, which never
    // exceeds what is still due.
    if (::setsockopt(socket_, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) == 0) mark_ = bytes;
  }

  const int socket_;
  const bool active_;
  int mark_ = 1;  // the socket default
};

absl::Status ReceiveError(ssize_t res, uint64_t got, uint64_t length, const std::string& name) {
  if (res == 0) {
    return absl::UnavailableError(
        absl::StrCat(name, ": connection closed after ", got, " of ", length, " bytes"));
  }
  if (res == -ETIMEDOUT) {
    return absl::DeadlineExceededError(
        absl::StrCat(name, ": timed out after ", got, " of ", length, " bytes"));
  }
  return absl::ErrnoToStatus(static_cast<int>(-res),
                             absl::StrCat(name, ": receive after ", got, " of ", length, " bytes"));
}

// Up to `len` payload bytes from `source`: through its reader, or straight off the socket.
ssize_t ReadSome(const BlockSource& source, char* buf, size_t len, absl::Time deadline) {
  if (source.reader != nullptr) return source.reader->Read(buf, len, deadline);
  return Recv(source.socket, buf, len, 0, deadline);
}

// Reads the `length` payload bytes from `source` through `scratch` a piece at a time,
// verifies each and hands it to `on_piece` with its offset in the block; then finishes
// the verification.
absl::Status ReadPieces(const BlockSource& source, PageBuffer& scratch, uint64_t length,
                        BlockVerifier& verifier, const std::string& name, absl::Time deadline,
                        absl::FunctionRef<absl::Status(absl::string_view, uint64_t)> on_piece) {
  scratch.Reserve(kScratchBytes);
  uint64_t got = 0;
  LowWaterMark mark(source.socket, length);
  while (got < length) {
    mark.Before(length - got);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(scratch.size(), length - got));
    const ssize_t n = ReadSome(source, scratch.data(), want, deadline);
    if (n <= 0) return ReceiveError(n, got, length, name);
    const absl::string_view piece(scratch.data(), static_cast<size_t>(n));
    FERRY_RETURN_IF_ERROR(verifier.Update(piece));
    FERRY_RETURN_IF_ERROR(on_piece(piece, got));
    got += static_cast<uint64_t>(n);
  }
  return verifier.Finish();
}

// Receives exactly `length` bytes into `out`, decrypted, and verifies them; *got counts
// the bytes received.
absl::Status ReceiveInto(const BlockSource& source, char* out, uint64_t length,
                         BlockVerifier& verifier, const std::string& name, absl::Time deadline,
                         uint64_t* got_count) {
  const int socket = source.socket;
  uint64_t& got = *got_count;
  got = 0;
  LowWaterMark mark(socket, length);
  while (got < length) {
    mark.Before(length - got);
    // At most 1 GiB per receive (an io_uring entry's length is 32 bits).
    const ssize_t n =
        ReadSome(source, out + got, static_cast<size_t>(std::min<uint64_t>(length - got, 1u << 30)),
                 deadline);
    if (n <= 0) return ReceiveError(n, got, length, name);
    FERRY_RETURN_IF_ERROR(verifier.Update(absl::string_view(out + got, static_cast<size_t>(n))));
    got += static_cast<uint64_t>(n);
  }
  return verifier.Finish();
}

// A block held in memory is at most 2 GiB (Spark's own limit for a block in a buffer):
// the length comes from the server, and a larger one would fail the allocation.
absl::Status CheckBufferable(uint64_t length, const std::string& name) {
  constexpr uint64_t kMaxBufferedBlockBytes = (uint64_t{1} << 31) - 1;
  if (length <= kMaxBufferedBlockBytes) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat(name, " is ", length, " bytes, over the ",
                                            kMaxBufferedBlockBytes,
                                            " a block in memory may have; fetch it to a file"));
}

// A sink that keeps nothing receives whole blocks only.
absl::Status CheckWhole(uint64_t offset, const std::string& name) {
  if (offset == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": asked to continue at byte ", offset, " a sink that keeps nothing"));
}

absl::Status CheckKept(uint64_t offset, uint64_t kept, const std::string& name) {
  if (offset <= kept) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": asked to continue at byte ", offset, " with ", kept, " kept"));
}

}  // namespace

void PageBuffer::Reserve(size_t bytes) {
  if (bytes <= size_) return;
  data_.reset(new (std::align_val_t(4096)) char[bytes]);
  size_ = bytes;
}

absl::Status CallbackSink::Receive(const BlockSource& source, size_t index, uint64_t offset,
                                   uint64_t length, BlockVerifier& verifier,
                                   const std::string& name, absl::Time deadline) {
  FERRY_RETURN_IF_ERROR(CheckWhole(offset, name));
  FERRY_RETURN_IF_ERROR(CheckBufferable(length, name));
  Spares<PageBuffer>::Lease buffer = buffers_.Take();
  buffer->Reserve(static_cast<size_t>(length));
  uint64_t got = 0;
  FERRY_RETURN_IF_ERROR(
      ReceiveInto(source, buffer->data(), length, verifier, name, deadline, &got));
  return on_block_(index, absl::string_view(buffer->data(), static_cast<size_t>(length)));
}

absl::Status BuffersSink::Receive(const BlockSource& source, size_t index, uint64_t offset,
                                  uint64_t length, BlockVerifier& verifier, const std::string& name,
                                  absl::Time deadline) {
  FERRY_RETURN_IF_ERROR(CheckBufferable(length, name));
  std::string& block = blocks_[index];
  FERRY_RETURN_IF_ERROR(CheckKept(offset, kept_[index], name));
  const uint64_t at = offset;
  kept_[index] = 0;
  block.resize(static_cast<size_t>(at + length));
  // The verifier sees the whole block: the bytes kept, then the rest.
  FERRY_RETURN_IF_ERROR(verifier.Update(absl::string_view(block.data(), static_cast<size_t>(at))));
  uint64_t got = 0;
  absl::Status received =
      ReceiveInto(source, block.data() + at, length, verifier, name, deadline, &got);
  // Cut off: what came is kept. Bytes that failed their checksum are not.
  if (!received.ok() && !verifier.mismatch().has_value()) kept_[index] = at + got;
  return received;
}

absl::Status DiscardSink::Receive(const BlockSource& source, size_t, uint64_t offset,
                                  uint64_t length, BlockVerifier& verifier, const std::string& name,
                                  absl::Time deadline) {
  FERRY_RETURN_IF_ERROR(CheckWhole(offset, name));
  FERRY_RETURN_IF_ERROR(ReadPieces(source, *scratch_.Take(), length, verifier, name, deadline,
                                   [](absl::string_view, uint64_t) { return absl::OkStatus(); }));
  bytes_ += length;
  return absl::OkStatus();
}

absl::Status FilesSink::Receive(const BlockSource& source, size_t index, uint64_t offset,
                                uint64_t length, BlockVerifier& verifier, const std::string& name,
                                absl::Time deadline) {
  const std::string& path = paths_[index];
  FERRY_RETURN_IF_ERROR(CheckKept(offset, kept_[index], name));
  const uint64_t at = offset;
  kept_[index] = 0;
  UniqueFd file(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (at == 0 ? O_TRUNC : 0), 0644));
  if (!file.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path, " for ", name));
  uint64_t written = 0;
  if (source.reader != nullptr) {
    // Decrypted in user space anyway: verified as it is written, after the bytes kept.
    FERRY_RETURN_IF_ERROR(ReadBack(file.get(), path, at, verifier, name));
    absl::Status received =
        ReceiveDecrypted(source, file.get(), path, at, length, verifier, name, deadline, &written);
    if (!received.ok()) {
      if (!verifier.mismatch().has_value()) kept_[index] = at + written;
      return received;
    }
    return verifier.Finish();
  }
  absl::Status received =
      SpliceToFile(source.socket, file.get(), path, at, length, name, deadline, &written);
  if (!received.ok()) {
    kept_[index] = at + written;  // the file holds the block's bytes up to there
    return received;
  }
  // Spliced bytes never passed through here: the whole block is read back.
  FERRY_RETURN_IF_ERROR(ReadBack(file.get(), path, at + length, verifier, name));
  return verifier.Finish();
}

absl::Status FilesSink::ReadBack(int file, const std::string& path, uint64_t end,
                                 BlockVerifier& verifier, const std::string& name) {
  if (!verifier.active() || end == 0) return absl::OkStatus();
  Spares<PageBuffer>::Lease scratch = scratch_.Take();
  scratch->Reserve(kScratchBytes);
  for (uint64_t pos = 0; pos < end;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(scratch->size(), end - pos));
    const ssize_t n = ReadFull(file, scratch->data(), want, static_cast<int64_t>(pos));
    if (n != static_cast<ssize_t>(want)) {
      return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO,
                                 absl::StrCat("read back ", path, " for ", name));
    }
    FERRY_RETURN_IF_ERROR(verifier.Update(absl::string_view(scratch->data(), want)));
    pos += want;
  }
  return absl::OkStatus();
}

absl::Status FilesSink::SpliceToFile(int socket, int file, const std::string& path, uint64_t at,
                                     uint64_t length, const std::string& name, absl::Time deadline,
                                     uint64_t* written) {
  Spares<std::optional<Pipe>>::Lease pipe = pipes_.Take();
  if (!pipe->has_value()) {
    FERRY_ASSIGN_OR_RETURN(Pipe made, Pipe::Create(pipe_bytes_));
    *pipe = std::move(made);
  }
  while (*written < length) {
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>((*pipe)->capacity_bytes(), length - *written));
    // socket -> pipe takes what has arrived; pipe -> file then drains all of it.
    const ssize_t in = Splice(socket, -1, (*pipe)->write_fd(), -1, want, SPLICE_F_MOVE, deadline);
    if (in <= 0) {
      pipe->reset();  // may hold bytes of a broken transfer
      return ReceiveError(in, *written, length, name);
    }
    const ssize_t out = SpliceAll((*pipe)->read_fd(), -1, file, static_cast<int64_t>(at + *written),
                                  static_cast<size_t>(in), SPLICE_F_MOVE, deadline);
    if (out != in) {
      pipe->reset();
      return absl::ErrnoToStatus(out < 0 ? static_cast<int>(-out) : EIO,
                                 absl::StrCat("write ", path, " for ", name));
    }
    *written += static_cast<uint64_t>(in);
  }
  return absl::OkStatus();
}

absl::Status FilesSink::ReceiveDecrypted(const BlockSource& source, int file,
                                         const std::string& path, uint64_t at, uint64_t length,
                                         BlockVerifier& verifier, const std::string& name,
                                         absl::Time deadline, uint64_t* written) {
  Spares<PageBuffer>::Lease scratch = scratch_.Take();
  scratch->Reserve(kScratchBytes);
  LowWaterMark mark(source.socket, length);
  while (*written < length) {
    mark.Before(length - *written);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(scratch->size(), length - *written));
    const ssize_t n = ReadSome(source, scratch->data(), want, deadline);
    if (n <= 0) return ReceiveError(n, *written, length, name);
    FERRY_RETURN_IF_ERROR(
        verifier.Update(absl::string_view(scratch->data(), static_cast<size_t>(n))));
    const ssize_t out = WriteAll(file, scratch->data(), static_cast<size_t>(n),
                                 static_cast<int64_t>(at + *written), deadline);
    if (out != n) {
      return absl::ErrnoToStatus(out < 0 ? static_cast<int>(-out) : EIO,
                                 absl::StrCat("write ", path, " for ", name));
    }
    *written += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace ferry
