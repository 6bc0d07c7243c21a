#include "common/spark/bitmap.h"

#include <roaring/roaring.h>

#include <new>

#include "absl/strings/str_cat.h"

namespace ferry::spark {

namespace {

roaring_bitmap_t* Created() {
  roaring_bitmap_t* r = roaring_bitmap_create();
  if (r == nullptr) throw std::bad_alloc();
  return r;
}

}  // namespace

void Bitmap::Free::operator()(roaring_bitmap_s* r) const { roaring_bitmap_free(r); }

Bitmap::Bitmap() : bits_(Created()) {}

Bitmap::Bitmap(const Bitmap& other) : bits_(roaring_bitmap_copy(other.bits_.get())) {
  if (bits_ == nullptr) throw std::bad_alloc();
}

Bitmap& Bitmap::operator=(const Bitmap& other) {
  if (this != &other) *this = Bitmap(other);
  return *this;
}

Bitmap::~Bitmap() = default;

Bitmap Bitmap::Of(const std::vector<uint32_t>& values) {
  Bitmap b;
  for (uint32_t v : values) b.Add(v);
  return b;
}

void Bitmap::Add(uint32_t value) { roaring_bitmap_add(bits_.get(), value); }

bool Bitmap::Contains(uint32_t value) const { return roaring_bitmap_contains(bits_.get(), value); }

uint64_t Bitmap::Cardinality() const { return roaring_bitmap_get_cardinality(bits_.get()); }

void Bitmap::Clear() { roaring_bitmap_clear(bits_.get()); }

void Bitmap::Subtract(const Bitmap& other) {
  roaring_bitmap_andnot_inplace(bits_.get(), other.bits_.get());
}

std::vector<uint32_t> Bitmap::Values() const {
  std::vector<uint32_t> out(static_cast<size_t>(Cardinality()));
  roaring_bitmap_to_uint32_array(bits_.get(), out.data());
  return out;
}

size_t Bitmap::SerializedBytes() const {
  return roaring_bitmap_portable_size_in_bytes(bits_.get());
}

void Bitmap::AppendTo(std::string* out) const {
  const size_t at = out->size();
  out->resize(at + SerializedBytes());
  roaring_bitmap_portable_serialize(bits_.get(), out->data() + at);
}

std::string Bitmap::Serialize() const {
  std::string out;
  AppendTo(&out);
  return out;
}

absl::StatusOr<Bitmap> Bitmap::Read(absl::string_view* bytes, uint64_t max_values) {
  // The size the header declares, checked against the bytes there, before anything is
  // allocated.
  const size_t size = roaring_bitmap_portable_deserialize_size(bytes->data(), bytes->size());
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a RoaringBitmap that is not whole or not one in the ", bytes->size(), " bytes there"));
  }
  roaring_bitmap_t* r = roaring_bitmap_portable_deserialize_safe(bytes->data(), size);
  if (r == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("a RoaringBitmap of ", size, " bytes that does not deserialize"));
  }
  Bitmap b(r);
  if (b.Cardinality() > max_values) {
    return absl::InvalidArgumentError(absl::StrCat("a RoaringBitmap of ", b.Cardinality(),
                                                   " values; at most ", max_values, " are taken"));
  }
  bytes->remove_prefix(size);
  return b;
}

bool operator==(const Bitmap& a, const Bitmap& b) {
  return roaring_bitmap_equals(a.bits_.get(), b.bits_.get());
}

}  // namespace ferry::spark
