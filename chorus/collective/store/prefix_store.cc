#include <chorus/collective/store/prefix_store.h>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {
  CHORUS_REQUIRE(prefix_.size() > 1 && base_ != nullptr, InvalidArgumentError,
                 "PrefixStore needs a non-empty prefix and a store (got prefix \"",
                 prefix_.substr(0, prefix_.size() - 1), "\"", base_ ? "" : " and no store", ")");
  set_default_timeout(base_->default_timeout());
}

std::string PrefixStore::full(const std::string& key) const {
  CHORUS_REQUIRE(!key.empty(), InvalidArgumentError, describe(), ": empty key");
  return prefix_ + key;
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, std::string_view value) { base_->set(full(key), value); }
std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get(full(key), timeout);
}
std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) { return base_->add(full(key), delta); }
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_->wait(full(keys), timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }
std::string PrefixStore::describe() const {
  return chorus::internal::str_cat(base_->describe(), ", keys under ", prefix_);
}

}  // namespace chorus::collective
