// The store (store.h) served over TCP by one process of the job — the chief, rank 0 — as c10d's
// TCPStore: a TcpStoreServer holds the keys, every process (the chief too) talks to it through a
// TcpStore client.
//
//   // rank 0
//   chorus::collective::TcpStoreServer server(29500);          // or 0: the OS picks, see port()
//   // every rank
//   chorus::collective::TcpStore store("10.0.0.1", 29500, {.connect_timeout = std::chrono::seconds(60)});
//   store.set("rank/1/addr", "10.0.0.2:40123");
//   std::string a = store.get("rank/0/addr", std::chrono::seconds(30));
//
// Wire protocol: store_protocol.h (framed, versioned, every length checked before it is trusted).
//
// Server. One thread polls the listening socket and every connection (poll(2); no thread per
// client); it serves any number of clients (at most kMaxConnections at once: more are refused by
// closing them). A get/wait whose keys are missing is parked on the server and answered as soon as
// a set/add makes them present, or with "timeout" at its deadline — nothing spins. A connection
// that sends something that is not the protocol is closed (its client then sees UnavailableError);
// the server itself keeps serving. The keys live as long as the server; destroying it closes every
// connection (clients waiting on it get UnavailableError). A server that cannot bind (port taken)
// → UnavailableError naming the address.
//
// Client. Each call borrows an idle connection from the client's pool or opens one (so a get that
// waits does not hold up a set from another thread of the same client). Connecting retries while
// the server is not there yet, until `connect_timeout`: then UnavailableError naming host:port.
// Once this client has reached the server, a new connection retries only `reconnect_timeout`: a
// server that was there and is gone has stopped (its rank died), and the callers — a rank writing
// why a collective failed, a goodbye — must learn it in seconds, not after the rendezvous's minutes.
// get/wait send their timeout to the server, which answers when the keys are there or at that
// timeout; the client waits for the answer at most the timeout plus kAnswerAllowance (100 ms: the
// round trip, so that get(key, 0ms) can look once). Any call that runs out of time (a server that accepts and never
// answers) raises DeadlineExceededError naming the keys and host:port, and its connection is dropped. A connection
// closed under a call → UnavailableError naming host:port; an answer that is not the protocol → DataLossError naming
// host:port. set/add/check wait at most the store's default timeout (store.h) for their answer.
//
// Thread-safety: TcpStore as store.h (every method from any thread). TcpStoreServer: port(),
// address() and the destructor from any one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <chorus/collective/store/store.h>

namespace chorus::collective {

namespace store_socket {
class Socket;
}

class TcpStoreServer {
 public:
  static constexpr std::size_t kMaxConnections = 4096;

  // Serves on `bind_host`:`port` ("0.0.0.0": every IPv4 address; "::" every address; port 0: the OS
  // picks one, see port()). Starts the thread; the store is served when the constructor returns.
  explicit TcpStoreServer(int port = 0, const std::string& bind_host = "0.0.0.0");
  ~TcpStoreServer();  // stops the thread, closes every connection, drops the keys
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on (the one chosen when constructed with 0).
  int port() const { return port_; }

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;
  int port_ = 0;
  std::thread thread_;
};

struct TcpStoreOptions {
  // How long a call keeps trying to reach a server that is not there (yet).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(300)};
  // The same once this client has been connected (at most connect_timeout).
  std::chrono::milliseconds reconnect_timeout{std::chrono::seconds(2)};
  // store.h's default timeout (calls that name none, and set/add/check's answer).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

class TcpStore final : public Store {
 public:
  static constexpr std::chrono::milliseconds kAnswerAllowance{100};

  // Does not connect: the first call does (so a client may be made before its server runs).
  TcpStore(std::string host, int port, TcpStoreOptions options = {});
  ~TcpStore() override;

  using Store::get;
  using Store::wait;
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override;  // "tcp store 10.0.0.1:29500"

 private:
  struct Reply;
  // Sends one request and returns its checked reply (see the header comment for the errors).
  Reply call(std::uint8_t op, std::int64_t number, std::vector<std::string> fields, std::chrono::milliseconds timeout,
             const std::vector<std::string>& keys);
  store_socket::Socket borrow(std::chrono::steady_clock::time_point deadline);
  void give_back(store_socket::Socket s);

  const std::string host_;
  const int port_;
  const TcpStoreOptions options_;
  const std::string peer_;  // "tcp store host:port"
  std::mutex mu_;           // idle_
  std::vector<store_socket::Socket> idle_;
  std::atomic<bool> connected_once_{false};
};

}  // namespace chorus::collective
