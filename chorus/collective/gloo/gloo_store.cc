// GlooStore: chorus's Store (collective/store/store.h) seen through Gloo's rendezvous::Store, the
// interface Gloo's full-mesh rendezvous writes and reads addresses through (gloo_internal.h).
#include <chorus/collective/gloo/gloo_internal.h>

namespace chorus::collective::gloo_detail {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(prefix_ + "/" + key, std::string_view(data.data(), data.size()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::string value = store_.get(prefix_ + "/" + key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(prefix_ + "/" + k);
  // Gloo passes its context's timeout; never wait longer than this store was told to.
  store_.wait(full, std::min(timeout, timeout_));
}

}  // namespace chorus::collective::gloo_detail
