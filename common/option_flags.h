// Command-line flags that set an options struct's fields, each declared once: in a
// flags file beside the struct (its package's flags.cc), with the struct's own default
// and its help, and bound there to the field it sets:
//
//   FERRY_OPTION_FLAG(DiskReader::Options, disk_workers, workers_per_disk,
//                     "Threads per disk that read what the page cache does not hold.");
//
// A binary that links a flags file sets the fields it binds with ApplyOptionFlags(&o)
// once absl::ParseCommandLine has run; a component's Validate() then checks their
// ranges. Integer fields take an int64_t flag: a negative value, or one past the
// field's type, is an error naming the flag. A flag whose value is not the field's as
// it stands (a file to read, a default for the machine) binds a function instead
// (FERRY_OPTION_FLAG_FN); one whose default is not the struct's (a port for the
// command line where tests want 0) names it (FERRY_OPTION_FLAG_DEFAULT).
//
// Flags files are alwayslink libraries: nothing calls into them, they only register.
#ifndef FERRY_COMMON_OPTION_FLAGS_H_
#define FERRY_COMMON_OPTION_FLAGS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/flag_names.h"

namespace ferry {

namespace option_flags_internal {

template <typename Field>
inline constexpr bool kIsCount = std::is_integral_v<Field> && !std::is_same_v<Field, bool>;

// The flag's type for a field of type Field: int64_t for counts, Field otherwise.
template <typename Field>
using FlagType = std::conditional_t<kIsCount<Field>, int64_t, Field>;

template <typename Field>
FlagType<Field> ToFlag(const Field& value) {
  return static_cast<FlagType<Field>>(value);
}

// A negative count: the field is set to 0 and OUT_OF_RANGE carries the value, for
// OptionFlags::Apply to report against the component's own rule.
template <typename Field>
absl::Status SetField(absl::string_view name, const FlagType<Field>& value, Field* field) {
  if constexpr (kIsCount<Field>) {
    if (value < 0) {
      *field = 0;
      return absl::OutOfRangeError(absl::StrCat(value));
    }
    if (static_cast<uint64_t>(value) > static_cast<uint64_t>(std::numeric_limits<Field>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("--", Dashed(name), " must be at most ",
                                                     std::numeric_limits<Field>::max(), ", not ",
                                                     value));
    }
    *field = static_cast<Field>(value);
  } else {
    *field = value;
  }
  return absl::OkStatus();
}

}  // namespace option_flags_internal

// The flags bound to Options' fields, in the order their files registered them.
template <typename Options>
class OptionFlags {
 public:
  using Setter = std::function<absl::Status(Options&)>;

  // The struct's defaults, which its flags take as theirs.
  static const Options& Defaults() {
    static const Options* const defaults = new Options();
    return *defaults;
  }

  // Registers a flag's setter (the macros below call it at static initialization).
  static bool Bind(absl::string_view name, Setter setter) {
    Names().emplace_back(name);
    Setters().push_back(std::move(setter));
    return true;
  }

  // Sets every bound field from its flag; the first error names its flag. A negative
  // count is refused with the rule the component's Validate() states for its flag (as
  // it would for 0: "--threads must be between 1 and 4096, not -1"), so that each flag
  // has one rule; "zero or more" where 0 passes.
  static absl::Status Apply(Options& options) {
    for (size_t i = 0; i < Setters().size(); ++i) {
      absl::Status status = Setters()[i](options);
      if (status.ok()) continue;
      if (status.code() != absl::StatusCode::kOutOfRange) return status;
      const std::string name = Dashed(Names()[i]);
      const std::string value(status.message());
      if constexpr (requires { options.Validate(); }) {
        const absl::Status rule = options.Validate();
        const std::string zero = ", not 0";
        if (absl::StartsWith(rule.message(), absl::StrCat("--", name, " ")) &&
            absl::EndsWith(rule.message(), zero)) {
          return absl::InvalidArgumentError(absl::StrCat(
              rule.message().substr(0, rule.message().size() - zero.size()), ", not ", value));
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be zero or more, not ", value));
    }
    return absl::OkStatus();
  }

  static size_t size() { return Setters().size(); }

 private:
  static std::vector<Setter>& Setters() {
    static std::vector<Setter>* const setters = new std::vector<Setter>();
    return *setters;
  }
  // Each setter's flag, by index.
  static std::vector<std::string>& Names() {
    static std::vector<std::string>* const names = new std::vector<std::string>();
    return *names;
  }
};

template <typename Options>
absl::Status ApplyOptionFlags(Options* options) {
  return OptionFlags<Options>::Apply(*options);
}

}  // namespace ferry

// --name sets Options::field, with the struct's default.
#define FERRY_OPTION_FLAG(Options, name, field, help)                                          \
  FERRY_OPTION_FLAG_DEFAULT(                                                                   \
      Options, name, field,                                                                    \
      ::ferry::option_flags_internal::ToFlag(::ferry::OptionFlags<Options>::Defaults().field), \
      help)

// --name sets Options::field, with a default of its own.
#define FERRY_OPTION_FLAG_DEFAULT(Options, name, field, default_value, help)                \
  ABSL_FLAG(::ferry::option_flags_internal::FlagType<decltype(Options::field)>, name,       \
            default_value, help);                                                           \
  [[maybe_unused]] static const bool ferry_option_flag_##name =                             \
      ::ferry::OptionFlags<Options>::Bind(#name, [](Options& options) {                     \
        return ::ferry::option_flags_internal::SetField(#name, absl::GetFlag(FLAGS_##name), \
                                                        &options.field);                    \
      })

// --name of type Type: `set(value, options)` (returning absl::Status) sets what it must.
#define FERRY_OPTION_FLAG_FN(Options, Type, name, default_value, help, set) \
  ABSL_FLAG(Type, name, default_value, help);                               \
  [[maybe_unused]] static const bool ferry_option_flag_##name =             \
      ::ferry::OptionFlags<Options>::Bind(                                  \
          #name, [](Options& options) { return set(absl::GetFlag(FLAGS_##name), options); })

#endif  // FERRY_COMMON_OPTION_FLAGS_H_
