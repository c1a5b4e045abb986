// make_gloo_communicator (gloo.h): the ranks announce themselves in the store, wait for each other
// (naming who did not come), and Gloo connects its full mesh of TCP connections. Without Gloo it
// only says so.
#include <chorus/collective/gloo/gloo.h>
#include <chorus/core/error.h>

#if CHORUS_WITH_GLOO
#include <signal.h>
#include <unistd.h>

#include <mutex>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <chorus/collective/deadline.h>
#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/core/env.h>
#include <chorus/core/host.h>
#include <chorus/core/logging.h>
#endif

namespace chorus::collective {

using internal::str_cat;

#if CHORUS_WITH_GLOO

bool gloo_available() { return true; }

namespace {

using gloo_detail::Clock;
using gloo_detail::Peer;
using std::chrono::milliseconds;

// Sets "<prefix>/<step>/<rank>" to `value` and waits until every rank set its own; DeadlineExceededError
// naming the ranks that did not, `what` saying what they did not do ("create their communicator").
void all_reach(Store& store, const std::string& prefix, const char* step, const char* what, int rank, int size,
               const std::string& value, milliseconds timeout) {
  store.set(str_cat(prefix, "/", step, "/", rank), value);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(str_cat(prefix, "/", step, "/", r));
  const auto start = Clock::now();
  try {
    store.wait(keys, timeout);
  } catch (const DeadlineExceededError&) {
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[static_cast<std::size_t>(r)]})) missing += str_cat(missing.empty() ? "" : ", ", r);
    throw DeadlineExceededError(str_cat("gloo: rank ", rank, " of ", size, " waited ",
                                        std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(),
                                        " ms for rank(s) [", missing, "] to ", what, " (prefix '", prefix, "' of ",
                                        store.describe(),
                                        "); a process did not start, crashed, or uses another store or prefix."));
  }
}

// Publishes this rank, waits until all `size` did; DeadlineExceededError naming the missing ones.
std::vector<Peer> arrive(Store& store, const std::string& prefix, int rank, int size, milliseconds timeout) {
  Peer me;
  me.host = host_name_or("unknown");
  me.pid = static_cast<long>(::getpid());
  all_reach(store, prefix, "peer", "create their communicator", rank, size, gloo_detail::encode_peer(me), timeout);
  std::vector<Peer> peers;
  for (int r = 0; r < size; ++r) peers.push_back(gloo_detail::decode_peer(store.get(str_cat(prefix, "/peer/", r))));
  return peers;
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that closed its connection (a dead
// process, or one that failed and closed on purpose) would kill this process with SIGPIPE. Ignore
// it (as Python does for PyTorch's Gloo) unless the program installed a handler of its own.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    if (::sigaction(SIGPIPE, &ignore, nullptr) == 0)
      CHORUS_LOG(INFO) << "gloo: SIGPIPE is ignored from now on in this process (Gloo's sockets would raise it "
                          "when a peer closes its connection)";
  });
}

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, int rank, int size,
                                                     const GlooCommunicatorOptions& options) {
  CHORUS_REQUIRE(size >= 1 && rank >= 0 && rank < size, InvalidArgumentError,
                 "make_gloo_communicator: rank must be in [0, size) with size >= 1, got rank ", rank, " of size ",
                 size);
  CHORUS_REQUIRE(!options.prefix.empty() && options.prefix.size() <= 1024, InvalidArgumentError,
                 "make_gloo_communicator: the prefix must be 1..1024 bytes, got ", options.prefix.size());
  CHORUS_REQUIRE(options.timeout.count() > 0, InvalidArgumentError,
                 "make_gloo_communicator: the timeout must be > 0 ms, got ", options.timeout.count());
  ignore_sigpipe();
  std::vector<Peer> peers = arrive(store, options.prefix, rank, size, options.timeout);
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname.empty() ? host_name_or("localhost") : options.hostname;
    device = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const ::gloo::Exception& e) {
    throw UnavailableError(str_cat("gloo: rank ", rank, " cannot open a TCP device on '", options.hostname,
                                   "' (GlooCommunicatorOptions::hostname): ", e.what()));
  }
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.timeout);
  gloo_detail::GlooStore gstore(store, options.prefix, options.timeout);
  try {
    context->connectFullMesh(gstore, device);
  } catch (const ::gloo::Exception& e) {
    throw UnavailableError(str_cat("gloo: rank ", rank, " of ", size, " could not connect to its peers (prefix '",
                                   options.prefix, "' of ", store.describe(), "): ", e.what()));
  }
  // Every rank holds all its connections before any rank uses one: without this, ranks that finished
  // connecting could run a collective, fail, and shut their connections down while a slower rank was
  // still connecting, which would then see "connection closed" instead of the failure's cause.
  all_reach(store, options.prefix, "connected", "connect to their peers", rank, size, "", options.timeout);
  return std::make_unique<gloo_detail::GlooCommunicator>(store, options.prefix, std::move(context), std::move(peers),
                                                         options.validate,
                                                         options.busy_poll && env::busy_poll_enabled());
}

#else  // !CHORUS_WITH_GLOO

bool gloo_available() { return false; }

std::unique_ptr<Communicator> make_gloo_communicator(Store&, int, int, const GlooCommunicatorOptions&) {
  throw UnavailableError(
      "gloo: this chorus was built without Gloo (install libgloo-dev and configure again; "
      "CMake said \"Gloo not found\")");
}

#endif

}  // namespace chorus::collective
