// What the processes of an MPI communicator send each other, and the MPI state that carries it:
// (besides the fingerprints of collective/wire_fingerprint.h) the wire form of peer-monitor addresses
// (exchanged once at creation), the Channel of a communicator and the graveyard of failed ones,
// and the polling every wait uses. Internal to the MPI backend (mpi_internal.h).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <chorus/collective/mpi/mpi_internal.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>

namespace chorus::collective::mpi_detail {

using internal::str_cat;

// --- peer-monitor addresses ---

template <std::size_t N>
void copy_text(char (&to)[N], const std::string& from) {
  std::memset(to, 0, N);
  std::memcpy(to, from.data(), std::min(from.size(), N - 1));
}
template <std::size_t N>
std::string read_text(const char (&from)[N]) {
  return std::string(from, strnlen(from, N));
}

WireAddress to_wire(const PeerMonitor* monitor, int rank) {
  WireAddress w;
  std::memset(&w, 0, sizeof w);
  w.rank = rank;
  w.pid = static_cast<std::int64_t>(::getpid());
  copy_text(w.host, host_name_or("unknown-host"));
  if (!monitor) return w;
  const PeerAddress& a = monitor->address();
  w.port = a.port;
  w.token = a.token;
  for (std::size_t i = 0; i < a.ips.size() && i < kWireIps; ++i) copy_text(w.ips[i], a.ips[i]);
  return w;
}

PeerAddress from_wire(const WireAddress& w) {
  PeerAddress a;
  a.rank = w.rank;
  a.port = w.port;
  a.pid = w.pid;
  a.token = w.token;
  a.host = read_text(w.host);
  for (const auto& ip : w.ips)
    if (ip[0] != '\0') a.ips.push_back(read_text(ip));
  return a;
}

// --- the Channel and polling ---

namespace {
struct Graveyard {
  std::mutex mu;
  std::vector<std::unique_ptr<Channel>> channels;
};
Graveyard& graveyard() {
  static auto* g = new Graveyard;  // never destroyed: MPI may write into the channels until exit
  return *g;
}
}  // namespace

std::atomic<bool> g_unfinished_duplicate{false};

void bury(std::unique_ptr<Channel> channel) {
  Graveyard& g = graveyard();
  std::lock_guard<std::mutex> lock(g.mu);
  g.channels.push_back(std::move(channel));
}

bool finish_unfinished_duplicates(milliseconds within) noexcept {
  Graveyard& g = graveyard();
  std::lock_guard<std::mutex> lock(g.mu);
  const auto until = Clock::now() + within;
  for (;;) {
    bool all_done = true;
    for (auto& ch : g.channels) {
      if (!ch->duplicating) continue;
      // The idup is the first request a duplicating channel abandons; it is the only one pending.
      for (MPI_Request& r : ch->abandoned) {
        if (r == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
        if (!done) all_done = false;
      }
      if (std::all_of(ch->abandoned.begin(), ch->abandoned.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; }))
        ch->duplicating = false;  // a whole communicator now; MPI_Finalize frees it
    }
    if (all_done) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Spinning polls yield the core between MPI_Test calls: where ranks share cores with each other or
// with the kernel's network work (test hosts on one machine, a rank per core plus its NIC's
// interrupts), a pure spin kept the peer's message from being processed — 2 ranks on 2 test hosts
// over veth: a 4-byte all-reduce took 1.1 ms spinning, 55 us yielding (bench_hosts). With a core
// to itself, sched_yield returns at once.
bool test_or_back_off(MPI_Request* request, Clock::time_point spin_until) {
  int done = 0;
  CHORUS_MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
  if (done) return true;
  if (Clock::now() >= spin_until)
    std::this_thread::sleep_for(kSleep);
  else
    sched_yield();
  return false;
}

}  // namespace chorus::collective::mpi_detail
