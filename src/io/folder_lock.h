// The locks between attn-tune processes: one on an output folder, so that two never write the
// same results and table, and one per device, so that two never time on the same device at once.
// Both are held while the object lives and released by the kernel if the process dies.
#pragma once
#include <functional>
#include <string>
#include <sys/types.h>

namespace attn {

class FolderLock {
public:
  // Locks `dir` (which must exist) through the file `dir`/.attn-tune.lock, which then holds this
  // process's pid. Throws InputError naming the folder and the holder's pid when another
  // process holds it (never waits).
  explicit FolderLock(const std::string& dir);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  [[nodiscard]] static const char* file_name() { return ".attn-tune.lock"; }
  // Removes the lock file while the lock is still held, for a holder that leaves no folder
  // behind: a process that opened the file meanwhile finds it gone once it locks, and opens
  // the folder's file again.
  void remove_file();

private:
  int fd_ = -1;
  bool held_ = false; // in the slots whose copies a fork closes in the child
  std::string path_;
};

class DeviceLock {
public:
  // Locks the device named `device_key` ("cuda-GPU-<uuid>", "cpu-<host>") through a file in
  // lock_dir(). When another process holds it: with `wait`, calls `waiting` once with the
  // holder's pid ("" when unknown) and blocks until it is free; without, throws
  // DeviceUnavailable naming the holder. `owner_pid` is the pid written for others to see
  // (0: this process's): a sweep's worker names the sweep, the process a user would stop.
  DeviceLock(const std::string& device_key, bool wait,
             const std::function<void(const std::string& holder_pid)>& waiting,
             pid_t owner_pid = 0);
  ~DeviceLock();
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;

  // $ATTN_TUNE_LOCK_DIR when set, else /tmp: shared by every user of the machine.
  [[nodiscard]] static std::string lock_dir();
  [[nodiscard]] static std::string path_for(const std::string& device_key);

private:
  int fd_ = -1;
  bool held_ = false; // in the slots whose copies a fork closes in the child
};

} // namespace attn
