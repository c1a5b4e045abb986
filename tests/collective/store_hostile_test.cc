// Hostile peers of the TCP store (collective/store/tcp_store.h): fake servers written here that
// answer garbage, truncated or oversized frames, close the connection, or accept and never answer;
// nothing listening at all; and clients that send garbage to the real server. Each must give the
// named error (DataLossError, UnavailableError, DeadlineExceededError) within the timeout: no hang,
// no crash. CTest label: hostile.
#include <chorus/collective/store/tcp_store.h>

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <functional>
#include <random>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/collective/store/store_protocol.h>
#include <chorus/collective/store/store_socket.h>
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using store_socket::Socket;

// A one-connection server on a free port: accepts, reads the request, then does `act` with the
// connection (and keeps it open until the test's end or `act` returns, as `act` decides).
class FakeServer {
 public:
  explicit FakeServer(std::function<void(Socket&)> act)
      : listener_(store_socket::listen_on("127.0.0.1", 0)), port_(store_socket::bound_port(listener_)) {
    thread_ = std::thread([this, act = std::move(act)] {
      Socket conn;
      while (!conn.valid() && !stop_) {
        conn = Socket(::accept(listener_.fd(), nullptr, nullptr));
        if (!conn.valid()) std::this_thread::sleep_for(5ms);
      }
      if (!conn.valid()) return;
      std::string request;
      try {
        store_socket::recv_some(conn, request, 4096, Clock::now() + 5s, "client");
      } catch (const Error&) {
        return;
      }
      act(conn);
      while (!stop_) std::this_thread::sleep_for(5ms);  // keep the connection open
    });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
  }
  int port() const { return port_; }

 private:
  Socket listener_;
  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void send_raw(Socket& s, const std::string& bytes) { store_socket::send_all(s, bytes, Clock::now() + 5s, "test"); }

TcpStore client_of(int port, std::chrono::milliseconds timeout = 2s) {
  return TcpStore("127.0.0.1", port, {.connect_timeout = timeout, .timeout = timeout});
}

TEST(StoreHostileTest, RandomBytesFromTheServerAreDataLoss) {
  std::mt19937 rng(46);
  for (int round = 0; round < 5; ++round) {
    std::string junk(64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    junk[0] = 'Z';  // never a valid magic by chance
    FakeServer server([&](Socket& c) { send_raw(c, junk); });
    EXPECT_THROW_WITH(client_of(server.port()).get("k", 2s), DataLossError,
                      "127.0.0.1:" + std::to_string(server.port()));
  }
}

TEST(StoreHostileTest, AWrongVersionAnOversizedLengthOrAWrongReplyAreDataLoss) {
  std::string frame = store_protocol::encode({.kind = 102, .number = 0, .fields = {"v"}});
  std::string v9 = frame;
  v9[3] = 9;
  FakeServer a([&](Socket& c) { send_raw(c, v9); });
  EXPECT_THROW_WITH(client_of(a.port()).get("k", 2s), DataLossError, "version 9");
  FakeServer b([&](Socket& c) { send_raw(c, std::string("CST\x01\xff\xff\xff\x7f", 8)); });  // 2 GiB body
  EXPECT_THROW_WITH(client_of(b.port()).get("k", 2s), DataLossError, "2147483647 bytes");
  FakeServer c([&](Socket& s) { send_raw(s, frame); });  // a value where set expects ok
  EXPECT_THROW(client_of(c.port()).set("k", "v"), DataLossError);
  FakeServer d([&](Socket& s) { send_raw(s, frame + "trailing"); });
  EXPECT_THROW(client_of(d.port()).get("k", 2s), DataLossError);
  FakeServer e([&](Socket& s) { send_raw(s, store_protocol::encode({.kind = 105, .number = 999, .fields = {"x"}})); });
  EXPECT_THROW_WITH(client_of(e.port()).get("k", 2s), DataLossError, "error code 999");
}

TEST(StoreHostileTest, ATruncatedFrameThenACloseIsUnavailable) {
  const std::string frame = store_protocol::encode({.kind = 102, .number = 0, .fields = {"value"}});
  for (std::size_t cut : {std::size_t{0}, std::size_t{2}, std::size_t{8}, frame.size() - 1}) {
    FakeServer server([&](Socket& c) {
      send_raw(c, frame.substr(0, cut));
      c.reset();
    });
    EXPECT_THROW_WITH(client_of(server.port()).get("k", 2s), UnavailableError,
                      "127.0.0.1:" + std::to_string(server.port()), "closed the connection");
  }
}

TEST(StoreHostileTest, AServerThatAcceptsAndNeverAnswersTimesOutOnTime) {
  FakeServer server([](Socket&) {});
  TcpStore s = client_of(server.port(), 300ms);
  const auto start = Clock::now();
  EXPECT_THROW_WITH(s.set("k", "v"), DeadlineExceededError, "no answer within 300 ms", "\"k\"");
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(StoreHostileTest, NothingListeningIsUnavailableNamingHostAndPortAfterTheConnectTimeout) {
  int port = 0;
  { port = TcpStoreServer(0).port(); }  // free now
  TcpStore s("127.0.0.1", port, {.connect_timeout = 300ms, .timeout = 300ms});
  const auto start = Clock::now();
  EXPECT_THROW_WITH(s.get("k", 300ms), UnavailableError, "127.0.0.1:" + std::to_string(port), "cannot reach");
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_LT(Clock::now() - start, 3s);
  TcpStore bad_host("no-such-host.invalid", 29500, {.connect_timeout = 200ms, .timeout = 200ms});
  EXPECT_THROW_WITH(bad_host.check({"k"}), UnavailableError, "no-such-host.invalid:29500");
}

TEST(StoreHostileTest, AServerThatStopsUnderAWaitingClientIsUnavailable) {
  auto server = std::make_unique<TcpStoreServer>(0);
  TcpStore s = client_of(server->port(), 5s);
  s.set("k", "v");
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  EXPECT_THROW_WITH(s.get("never", 5s), UnavailableError, "closed the connection");
  stopper.join();
}

TEST(StoreHostileTest, GarbageFromAClientClosesOnlyThatConnection) {
  TcpStoreServer server(0);
  TcpStore good = client_of(server.port());
  good.set("k", "v");
  const auto deadline = Clock::now() + 2s;
  for (const std::string& junk : {std::string("GET / HTTP/1.1\r\n\r\n"), std::string("CST\x01\xff\xff\xff\xff", 8),
                                  store_protocol::encode({.kind = 77, .number = 0, .fields = {}}),
                                  store_protocol::encode({.kind = 1, .number = 0, .fields = {"only a key"}})}) {
    Socket s = store_socket::connect_until("127.0.0.1", server.port(), deadline);
    send_raw(s, junk);
    std::string reply;
    EXPECT_THROW(while (store_socket::recv_some(s, reply, 4096, Clock::now() + 2s, "server")){}, UnavailableError)
        << "the server should close a connection that sent garbage";
    EXPECT_TRUE(reply.empty());
  }
  EXPECT_EQ(good.get("k", 1s), "v");  // still serving
}

}  // namespace
}  // namespace chorus::collective
