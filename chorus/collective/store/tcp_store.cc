// The TCP store's client (tcp_store.h); the server is tcp_store_server.cc.
#include <chorus/collective/store/tcp_store.h>

#include <chorus/collective/store/store_protocol.h>
#include <chorus/collective/store/store_socket.h>
#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

using chorus::internal::join;
using chorus::internal::str_cat;
using std::chrono::milliseconds;
using store_protocol::StoreMessage;
using store_protocol::StoreOp;
using store_protocol::StoreReply;
using store_socket::Clock;
using store_socket::Socket;

namespace {

constexpr std::size_t kIdleConnections = 8;  // kept open for later calls
constexpr std::size_t kRecvChunk = 64 * 1024;

void check_key(const std::string& key, const std::string& peer) {
  CHORUS_REQUIRE(!key.empty() && key.size() <= Store::kMaxKeyBytes, InvalidArgumentError, peer, ": key \"",
                 key.substr(0, 64), key.size() > 64 ? "..." : "", "\" has ", key.size(), " bytes (valid: 1..",
                 Store::kMaxKeyBytes, ")");
}

void check_keys(const std::vector<std::string>& keys, const std::string& peer) {
  CHORUS_REQUIRE(keys.size() <= store_protocol::kMaxStoreFields, InvalidArgumentError, peer, ": ", keys.size(),
                 " keys in one call; at most ", store_protocol::kMaxStoreFields);
  for (const auto& k : keys) check_key(k, peer);
}

std::string quoted(const std::vector<std::string>& keys) { return join(keys, {.quote = "\"", .max_items = 8}); }

}  // namespace

struct TcpStore::Reply {
  StoreMessage message;
};

TcpStore::TcpStore(std::string host, int port, TcpStoreOptions options)
    : host_(std::move(host)),
      port_(port),
      options_(options),
      peer_(str_cat("tcp store ", store_socket::endpoint(host_, port_))) {
  CHORUS_REQUIRE(!host_.empty() && port_ > 0 && port_ <= 65535, InvalidArgumentError, "TcpStore: \"",
                 store_socket::endpoint(host_, port_), "\" is not a host and TCP port (1..65535)");
  set_default_timeout(options_.timeout);
}

TcpStore::~TcpStore() = default;

std::string TcpStore::describe() const { return peer_; }

Socket TcpStore::borrow(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Socket s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
  }
  const auto window = connected_once_.load() ? std::min(options_.connect_timeout, options_.reconnect_timeout)
                                             : options_.connect_timeout;
  Socket s = store_socket::connect_until(host_, port_, std::min(deadline, Clock::now() + window));
  connected_once_.store(true);
  return s;
}

void TcpStore::give_back(Socket s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kIdleConnections) idle_.push_back(std::move(s));
}

TcpStore::Reply TcpStore::call(std::uint8_t op, std::int64_t number, std::vector<std::string> fields,
                               milliseconds timeout, const std::vector<std::string>& keys) {
  CHORUS_REQUIRE(timeout.count() >= 0, InvalidArgumentError, peer_, ": negative timeout ", timeout.count(), " ms");
  const auto start = Clock::now();
  // Connecting may take up to connect_timeout on top of the call's own wait, as c10d's.
  Socket s = borrow(start + std::max(timeout, options_.connect_timeout));
  const auto deadline = Clock::now() + timeout + kAnswerAllowance;
  const std::string frame = store_protocol::encode({.kind = op, .number = number, .fields = std::move(fields)});
  store_socket::send_all(s, frame, deadline, peer_);
  store_protocol::StoreFrameDecoder decoder(peer_);
  std::string bytes;
  std::optional<StoreMessage> reply;
  while (!(reply = decoder.next())) {
    bytes.clear();
    if (!store_socket::recv_some(s, bytes, kRecvChunk, deadline, peer_))
      throw DeadlineExceededError(str_cat(peer_, ": no answer within ", timeout.count(), " ms to a request on key(s) ",
                                          quoted(keys), " (the server is alive but does not answer?)"));
    decoder.feed(bytes);
  }
  CHORUS_REQUIRE(decoder.pending() == 0, DataLossError, peer_, " sent ", decoder.pending(),
                 " bytes after its answer (not a chorus store?)");
  store_protocol::check_reply(*reply, static_cast<StoreOp>(op), peer_);
  if (reply->kind == static_cast<std::uint8_t>(StoreReply::kError)) {
    const auto code = reply->number;
    give_back(std::move(s));
    CHORUS_REQUIRE(code > 0 && code <= static_cast<std::int64_t>(ErrorCode::kDataLoss), DataLossError, peer_,
                   " answered with error code ", code, ", which is not one (message: ", reply->fields[0], ")");
    throw_error(static_cast<ErrorCode>(code), reply->fields[0]);
  }
  if (reply->kind == static_cast<std::uint8_t>(StoreReply::kTimeout)) {
    give_back(std::move(s));
    throw DeadlineExceededError(
        str_cat(peer_, ": key(s) ", quoted(reply->fields), " still missing after ", timeout.count(), " ms"));
  }
  give_back(std::move(s));
  return Reply{std::move(*reply)};
}

void TcpStore::set(const std::string& key, std::string_view value) {
  check_key(key, peer_);
  CHORUS_REQUIRE(value.size() <= kMaxValueBytes, InvalidArgumentError, peer_, ": the value of key \"", key, "\" has ",
                 value.size(), " bytes; at most ", kMaxValueBytes);
  call(static_cast<std::uint8_t>(StoreOp::kSet), 0, {key, std::string(value)}, default_timeout(), {key});
}

std::string TcpStore::get(const std::string& key, milliseconds timeout) {
  check_key(key, peer_);
  Reply r = call(static_cast<std::uint8_t>(StoreOp::kGet), timeout.count(), {key}, timeout, {key});
  return std::move(r.message.fields[0]);
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  check_key(key, peer_);
  return call(static_cast<std::uint8_t>(StoreOp::kAdd), delta, {key}, default_timeout(), {key}).message.number;
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  check_keys(keys, peer_);
  call(static_cast<std::uint8_t>(StoreOp::kWait), timeout.count(), keys, timeout, keys);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  check_keys(keys, peer_);
  return call(static_cast<std::uint8_t>(StoreOp::kCheck), 0, keys, default_timeout(), keys).message.number == 1;
}

}  // namespace chorus::collective
