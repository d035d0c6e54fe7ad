// An exclusive lock on an output folder, so that two attn-tune processes never write the same
// results and table: held while the object lives, released by the kernel if the process dies.
#pragma once
#include <string>

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

private:
  int fd_ = -1;
};

} // namespace attn
