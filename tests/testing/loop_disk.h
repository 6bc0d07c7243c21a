// LoopDisk: a real block device for tests of failing disks. An ext4 filesystem on a loop
// device over a sparse file, mounted at a directory the test names. FailFrom() shrinks
// the device under the mounted filesystem, so that the kernel answers every read past a
// byte with EIO ("attempt to access beyond end of device"), as it does for a bad region
// of a disk; Heal() puts the cut bytes back and the same reads succeed.
//
// This kernel has no device-mapper (dmsetup's `error` and `flakey` targets would do the
// same); a shrunk loop device needs nothing but the loop driver.
//
// Needs root. The filesystem has no journal and is mounted noatime, so reads never
// write to it and a failing region costs only the reads of the files on it.
#ifndef FERRY_TESTS_TESTING_LOOP_DISK_H_
#define FERRY_TESTS_TESTING_LOOP_DISK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ferry::testing {

class LoopDisk {
 public:
  // A `bytes` filesystem mounted at `mount_point` (an empty directory), its backing file
  // in `work_dir`. UNIMPLEMENTED when this machine cannot have one (not root, no loop
  // driver, no ext4), saying why: the caller skips. Loop devices a killed test left
  // behind (their backing files name a process that is gone) are removed first.
  static absl::StatusOr<std::unique_ptr<LoopDisk>> Create(const std::string& work_dir,
                                                          const std::string& mount_point,
                                                          uint64_t bytes);
  LoopDisk(const LoopDisk&) = delete;
  LoopDisk& operator=(const LoopDisk&) = delete;
  // Unmounts the filesystem and detaches the device.
  ~LoopDisk();

  const std::string& device() const { return device_; }  // "/dev/loop0"

  // Where on the device the first byte of `path` (a file on this filesystem, synced) is.
  absl::StatusOr<uint64_t> FirstByteOnDevice(const std::string& path) const;
  // Where on the device the bytes of `path` end.
  absl::StatusOr<uint64_t> EndOnDevice(const std::string& path) const;

  // Every read of the device at or past `offset` fails with EIO from now on.
  absl::Status FailFrom(uint64_t offset);
  // The device whole again, its bytes as they were.
  absl::Status Heal();

 private:
  LoopDisk(std::string backing, std::string mount_point, std::string device, uint64_t bytes)
      : backing_(std::move(backing)),
        mount_point_(std::move(mount_point)),
        device_(std::move(device)),
        bytes_(bytes) {}
  // The device takes its size from the backing file's again.
  absl::Status Resize() const;

  const std::string backing_;
  const std::string mount_point_;
  const std::string device_;
  const uint64_t bytes_;
  bool mounted_ = false;
  // While failing: where the device was cut, and the cut bytes.
  uint64_t cut_ = 0;
  std::string saved_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_LOOP_DISK_H_
