// The store (store.h) in a directory that every process of the job sees — a shared filesystem
// (NFS, Lustre, a mounted volume) or a local one for processes of one host — as Gloo's FileStore,
// with chorus's contract. No server: the job only needs the path.
//
//   chorus::collective::FileStore store("/shared/job42/attempt0");  // created if missing
//   store.set("rank/1/addr", "10.0.0.2:40123");
//   std::string a = store.get("rank/0/addr", std::chrono::seconds(30));
//
// Layout: one file per key, named "k" + 32 hex digits of a 128-bit hash of the key, holding a
// header ("CHFS" + version byte + key length u32 LE), the key, then the value. The key is stored
// so that a hash collision or a foreign file is found (DataLossError), never taken for the value.
//   set   writes a temporary file beside it and renames it over the key's (atomic: a reader sees
//         the old value or the new one, never half);
//   add   the same under flock(2) on "<dir>/.add.lock" (exclusive across processes and threads);
//   get / wait   poll for the files with a growing pause (1 ms doubling to 100 ms) until the
//         timeout — files are not watched, so a value is seen up to 100 ms late; check() looks once.
// Errors as store.h: DeadlineExceededError naming the missing keys and the directory; a directory
// that cannot be created or written → UnavailableError naming the path and errno's text; a key
// file that is not the format (truncated, foreign, over the limits) → DataLossError naming the file.
// Start each attempt of a job in a fresh directory (or use a PrefixStore): files outlive processes.
//
// Thread-safety: as store.h (every method from any thread, and from any process sharing the path).
#pragma once

#include <string>

#include <chorus/collective/store/store.h>

namespace chorus::collective {

class FileStore final : public Store {
 public:
  // Creates `path` (and its parents) when missing. UnavailableError when it cannot.
  explicit FileStore(std::string path, std::chrono::milliseconds timeout = std::chrono::seconds(300));

  using Store::get;
  using Store::wait;
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override;  // "file store /shared/job42"

  // The file that holds `key` (for tests and for people looking at the directory).
  std::string file_of(const std::string& key) const;

 private:
  const std::string path_;
};

}  // namespace chorus::collective
