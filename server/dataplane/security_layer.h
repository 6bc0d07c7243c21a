// A security layer a connection's protocol negotiated (AES-CTR after Spark's AuthEngine
// on the Spark front door, server/spark/auth/spark_cipher.h): once the connection core is
// given one, every byte either way passes through it, so blocks are read into a buffer
// and sealed instead of spliced.
#ifndef FERRY_SERVER_DATAPLANE_SECURITY_LAYER_H_
#define FERRY_SERVER_DATAPLANE_SECURITY_LAYER_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

class SecurityLayer {
 public:
  virtual ~SecurityLayer() = default;
  // Appends to *wire the bytes that carry `plain` to the peer.
  virtual absl::Status Seal(absl::string_view plain, std::string* wire) = 0;
  // Takes bytes as they arrived from the peer, in any pieces, and appends to *plain what
  // they carry. An error (bytes that do not open) ends the connection: the core reads
  // nothing more; CANCELLED is the peer ending the layer's session (TLS's
  // close_notify), which ends it as a closed socket does, unlogged.
  virtual absl::Status Open(absl::string_view wire, std::string* plain) = 0;
  // Appends to *wire what the layer itself has to send after Open (a handshake's
  // messages); the core sends it at once.
  virtual void TakeOwnOutput(std::string* wire) { (void)wire; }
  // What the layer itself holds for its connection (its state and record buffers):
  // charged, with the core's buffers for sealed bytes, to the request-buffer budget.
  virtual size_t MemoryBytes() const { return 0; }
};

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_SECURITY_LAYER_H_
