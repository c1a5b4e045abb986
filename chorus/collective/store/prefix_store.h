// A view of a store (store.h) whose keys all start with a prefix, as Gloo's PrefixStore and
// c10d's PrefixStore: the keys of one job, one restart attempt or one communicator kept apart from
// the others in the same store.
//
//   auto attempt = std::make_shared<chorus::collective::PrefixStore>("attempt/3", base);
//   attempt->set("rank/0", "...");      // sets "attempt/3/rank/0" in base
//
// Every call is the base store's with "<prefix>/" put before each key (messages name the full
// keys, so DeadlineExceededError says "attempt/3/rank/2"); its errors are the base store's. A key
// that the prefix pushes past Store::kMaxKeyBytes → InvalidArgumentError from the base store.
// default_timeout is the base's when the view is made.
//
// Thread-safety: as the base store's. The view shares ownership of the base.
#pragma once

#include <memory>
#include <string>

#include <chorus/collective/store/store.h>

namespace chorus::collective {

class PrefixStore final : public Store {
 public:
  // InvalidArgumentError when `prefix` is empty or `base` is null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  using Store::get;
  using Store::wait;
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override;  // "tcp store 10.0.0.1:29500, keys under attempt/3/"

  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const;  // InvalidArgumentError for an empty key
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  const std::string prefix_;  // with its trailing '/'
  const std::shared_ptr<Store> base_;
};

}  // namespace chorus::collective
