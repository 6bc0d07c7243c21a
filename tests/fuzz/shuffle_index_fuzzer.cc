// libFuzzer target: the shuffle index and checksum parsers on arbitrary bytes. The
// first 8 input bytes are the data file's size; the rest is the file. Whatever the
// parser accepts must satisfy the invariants the server relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/shuffle_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t data_bytes;
  std::memcpy(&data_bytes, data, 8);
  const absl::string_view file(reinterpret_cast<const char*>(data) + 8, size - 8);
  if (auto offsets = ferry::ParseIndex(file, data_bytes, "fuzz.index"); offsets.ok()) {
    if (offsets->size() < 2 || offsets->front() != 0 || offsets->back() != data_bytes) {
      std::abort();
    }
    for (size_t i = 1; i < offsets->size(); ++i) {
      if ((*offsets)[i] < (*offsets)[i - 1]) std::abort();
    }
  }
  const size_t partitions = file.size() / 8;
  if (auto sums = ferry::ParseChecksums(file, partitions, "fuzz.checksum"); sums.ok()) {
    if (sums->size() != partitions) std::abort();
  }
  return 0;
}
