// Bitmap: a set of map indexes as push-based shuffle carries them (Spark's
// RoaringBitmap), over CRoaring. Serialized in the portable format, byte for byte as
// Spark's RoaringBitmap.serialize() writes a bitmap built the same way (containers
// are never run-optimized: Spark's trackers are built by adds alone), with no length
// before it: the format says where it ends. A merged partition's .meta file is such
// bitmaps, one per chunk; MergeStatuses carries one per partition.
#ifndef FERRY_COMMON_SPARK_BITMAP_H_
#define FERRY_COMMON_SPARK_BITMAP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct roaring_bitmap_s;

namespace ferry::spark {

class Bitmap {
 public:
  Bitmap();
  Bitmap(const Bitmap& other);
  Bitmap& operator=(const Bitmap& other);
  Bitmap(Bitmap&&) noexcept = default;
  Bitmap& operator=(Bitmap&&) noexcept = default;
  ~Bitmap();

  static Bitmap Of(const std::vector<uint32_t>& values);

  void Add(uint32_t value);
  bool Contains(uint32_t value) const;
  uint64_t Cardinality() const;
  bool empty() const { return Cardinality() == 0; }
  void Clear();
  // Removes every value `other` holds.
  void Subtract(const Bitmap& other);
  std::vector<uint32_t> Values() const;

  // The portable serialization, appended to *out; its size.
  void AppendTo(std::string* out) const;
  size_t SerializedBytes() const;
  std::string Serialize() const;

  // The bitmap at the front of *bytes, which is advanced past it. INVALID_ARGUMENT when
  // the bytes there are not a whole bitmap (cut short, a bad cookie or container count,
  // containers that overrun the bytes) or hold more than `max_values`.
  static absl::StatusOr<Bitmap> Read(absl::string_view* bytes, uint64_t max_values);

  friend bool operator==(const Bitmap& a, const Bitmap& b);

 private:
  struct Free {
    void operator()(roaring_bitmap_s* r) const;
  };
  explicit Bitmap(roaring_bitmap_s* r) : bits_(r) {}
  std::unique_ptr<roaring_bitmap_s, Free> bits_;
};

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_BITMAP_H_
