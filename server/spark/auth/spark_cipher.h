// The AES-CTR layer of a Spark connection that authenticated with Spark's AuthEngine
// (spark.network.crypto.enabled): every byte after the handshake's response, both ways,
// is encrypted, as Spark's CtrTransportCipher does (common/spark/crypto.h).
//
// Which AuthEngine version the client runs (spark.network.crypto.authEngineVersion) is
// in no message, and the versions' keys differ. Spark's own service takes the version
// from its configuration and fails every client of the other; this layer holds the
// keys of each version it accepts and lets the client's first frame header tell: the
// first bytes it sends decrypt to a frame length within the request-frame bound and a
// client message type under the right keys, and to noise under the wrong ones (a
// chance below 2^-40 of passing). Nothing is sent before the client's first frame
// (the server only answers), so nothing is encrypted before the choice. Bytes that
// decrypt to no frame under any key (a client that chose Spark's AES-GCM transport
// cipher, spark.network.crypto.cipher=AES/GCM/NoPadding, which is not served) end the
// connection with an error that says so.
#ifndef FERRY_SERVER_SPARK_AUTH_SPARK_CIPHER_H_
#define FERRY_SERVER_SPARK_AUTH_SPARK_CIPHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/spark/crypto.h"
#include "server/dataplane/security_layer.h"

namespace ferry {

class SparkCtrLayer final : public SecurityLayer {
 public:
  struct Candidate {
    int version;
    spark::SessionKeys keys;  // the server's side
  };
  // `candidates`: the keys of each accepted version (at least one). `max_frame_bytes`:
  // the largest request frame the connection takes. `chosen` is called once with the
  // version the client's first bytes showed.
  static absl::StatusOr<std::unique_ptr<SparkCtrLayer>> Create(
      std::vector<Candidate> candidates, uint64_t max_frame_bytes,
      std::function<void(int version)> chosen);

  absl::Status Seal(absl::string_view plain, std::string* wire) override;
  absl::Status Open(absl::string_view wire, std::string* plain) override;

 private:
  struct Keyed {
    int version;
    spark::CtrCipher in;
    spark::CtrCipher out;
  };
  SparkCtrLayer(std::vector<Keyed> keyed, uint64_t max_frame_bytes, std::function<void(int)> chosen)
      : keyed_(std::move(keyed)), max_frame_bytes_(max_frame_bytes), chosen_(std::move(chosen)) {}
  // Decides on the version from the first kProbeBytes in pending_, and appends their
  // plaintext to *plain.
  absl::Status Choose(std::string* plain);

  std::vector<Keyed> keyed_;  // every candidate until the choice, then the chosen one
  bool decided_ = false;
  std::string pending_;  // the client's first bytes, until there are kProbeBytes
  const uint64_t max_frame_bytes_;
  std::function<void(int)> chosen_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_AUTH_SPARK_CIPHER_H_
