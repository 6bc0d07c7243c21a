// BlockSink: where fetched blocks go. The fetcher reads each block's header and hands
// the payload, still in the socket, to the sink, which consumes exactly `length` bytes.
// On an encrypted connection (Spark's AES-CTR, TLS) the payload is read through the
// connection's PlainReader into user space before anything else sees it; FilesSink then
// writes what it read instead of splicing.
//
// Sinks run on the fetching thread's fibers and use the fiber ops (common/io/ops.h).
// One sink serves every connection of a fetch: fibers of one thread never run at once,
// so sinks need no locking, but each connection's fiber parks in its reads mid-block,
// so several blocks are being received at a time, each into buffers and pipes of its
// own (Spares).
#ifndef FERRY_CLIENT_BLOCK_SINK_H_
#define FERRY_CLIENT_BLOCK_SINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/block_verifier.h"
#include "common/pipe.h"

namespace ferry {

// A buffer that starts on a page boundary. The kernel's copy of received bytes into a
// buffer that sits 1 to 31 bytes past the page offset the bytes have in their source
// pages (the server's page cache, for spliced blocks) costs up to 3x per byte on some
// CPUs (4K aliasing, benchmarks/results/receiver.md); malloc puts a large
// buffer 16 bytes past a page, which page-aligned blocks always hit.
class PageBuffer {
 public:
  char* data() { return data_.get(); }
  size_t size() const { return size_; }
  // Grows (contents not kept) to at least `bytes`.
  void Reserve(size_t bytes);

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete[](p, std::align_val_t(4096)); }
  };
  std::unique_ptr<char[], Free> data_;
  size_t size_ = 0;
};

// What a sink lends each block while it receives it: a buffer or a pipe, taken from the
// spares the blocks before it gave back, or made. As many exist as blocks were ever
// received at once (a fetch's streams at most).
template <typename T>
class Spares {
 public:
  class Lease {
   public:
    Lease(Spares& owner, std::unique_ptr<T> item) : owner_(owner), item_(std::move(item)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { owner_.free_.push_back(std::move(item_)); }
    T& operator*() const { return *item_; }
    T* operator->() const { return item_.get(); }

   private:
    Spares& owner_;
    std::unique_ptr<T> item_;
  };

  Lease Take() {
    if (free_.empty()) return Lease(*this, std::make_unique<T>());
    std::unique_ptr<T> item = std::move(free_.back());
    free_.pop_back();
    return Lease(*this, std::move(item));
  }

 private:
  std::vector<std::unique_ptr<T>> free_;
};

// Reads what an encrypted connection carries, decrypted (Spark's AES-CTR, TLS), on the
// calling fiber.
class PlainReader {
 public:
  virtual ~PlainReader() = default;
  // Up to `len` bytes of plaintext into `buf`: how many, 0 when the peer closed, or
  // -errno (-ETIMEDOUT past `deadline`, -EPROTO for bytes that do not decrypt).
  virtual ssize_t Read(char* buf, size_t len, absl::Time deadline) = 0;
};

// Where a block's payload is: the connection's socket, and the reader its bytes pass
// through when the connection is encrypted (then nothing is spliced).
struct BlockSource {
  int socket = -1;
  PlainReader* reader = nullptr;
};

class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // Consumes `length` payload bytes of the caller's block `index` from `source`: the
  // block from byte `offset` on, its first `offset` bytes those the sink kept (at most
  // Kept(index)); 0 for the whole block. Feeds each byte of the block to `verifier`
  // (which may be inactive). `name` labels errors. Every operation finishes by
  // `deadline`.
  virtual absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset,
                               uint64_t length, BlockVerifier& verifier, const std::string& name,
                               absl::Time deadline) = 0;
  // The bytes of block `index` this sink kept from a receive that the connection cut
  // off (lost, closed, timed out): the fetcher asks the rest from there, of the same
  // server or a replica. 0 when it keeps none (the default: CallbackSink's buffer is
  // lent for one call, DiscardSink drops what it reads) or the bytes failed their check.
  virtual uint64_t Kept(size_t /*index*/) const { return 0; }
};

// Calls `on_block(index, bytes)` with each whole block, in a buffer reused for the next
// block once the call returns (it grows to the largest block).
class CallbackSink final : public BlockSink {
 public:
  using Callback = std::function<absl::Status(size_t index, absl::string_view bytes)>;
  explicit CallbackSink(Callback on_block) : on_block_(std::move(on_block)) {}
  absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset, uint64_t length,
                       BlockVerifier& verifier, const std::string& name,
                       absl::Time deadline) override;

 private:
  Callback on_block_;
  Spares<PageBuffer> buffers_;
};

// Keeps each block in its own buffer: blocks()[index]. Keeps what a cut-off block had
// received, so the rest is all that is fetched again.
class BuffersSink final : public BlockSink {
 public:
  explicit BuffersSink(size_t blocks) : blocks_(blocks), kept_(blocks) {}
  absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset, uint64_t length,
                       BlockVerifier& verifier, const std::string& name,
                       absl::Time deadline) override;
  uint64_t Kept(size_t index) const override { return kept_[index]; }
  std::vector<std::string>& blocks() { return blocks_; }

 private:
  std::vector<std::string> blocks_;
  std::vector<uint64_t> kept_;
};

// Writes block `index` to `paths[index]` (created or truncated) with splice
// socket -> pipe -> file: no payload byte enters user space. Verification, when the
// block has checksums, reads the written bytes back (from the page cache). From an
// encrypted connection, blocks are received, decrypted, verified and written. A cut-off block's
// file keeps what was written, and the rest is written after it.
class FilesSink final : public BlockSink {
 public:
  FilesSink(std::vector<std::string> paths, size_t pipe_bytes = size_t{1} << 20)
      : paths_(std::move(paths)), kept_(paths_.size()), pipe_bytes_(pipe_bytes) {}
  absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset, uint64_t length,
                       BlockVerifier& verifier, const std::string& name,
                       absl::Time deadline) override;
  uint64_t Kept(size_t index) const override { return kept_[index]; }

 private:
  // The `length` bytes written at `at` onwards; *written counts them as they go. The
  // decrypted ones are fed to `verifier` on the way.
  absl::Status SpliceToFile(int socket, int file, const std::string& path, uint64_t at,
                            uint64_t length, const std::string& name, absl::Time deadline,
                            uint64_t* written);
  absl::Status ReceiveDecrypted(const BlockSource& source, int file, const std::string& path,
                                uint64_t at, uint64_t length, BlockVerifier& verifier,
                                const std::string& name, absl::Time deadline, uint64_t* written);
  // Feeds the file's bytes [0, end) to `verifier` (nothing when it is inactive).
  absl::Status ReadBack(int file, const std::string& path, uint64_t end, BlockVerifier& verifier,
                        const std::string& name);

  std::vector<std::string> paths_;
  std::vector<uint64_t> kept_;
  size_t pipe_bytes_;
  Spares<std::optional<Pipe>> pipes_;
  Spares<PageBuffer> scratch_;
};

// Reads each block (verifying it when it has checksums) and drops it; counts bytes.
class DiscardSink final : public BlockSink {
 public:
  absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset, uint64_t length,
                       BlockVerifier& verifier, const std::string& name,
                       absl::Time deadline) override;
  uint64_t bytes() const { return bytes_; }

 private:
  Spares<PageBuffer> scratch_;
  uint64_t bytes_ = 0;
};

}  // namespace ferry

#endif  // FERRY_CLIENT_BLOCK_SINK_H_
