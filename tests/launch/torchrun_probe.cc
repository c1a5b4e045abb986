// A tiny worker for chorus_run_agent_test.cc (chorus-run without MPI). It prints the torchrun
// variables it got and what distribute::ClusterResolver makes of them, then meets the other
// workers through collective::store_rendezvous (served by worker rank 0 on MASTER_PORT) and prints
// what the rendezvous saw. Lines are written whole (one write each), so workers sharing a pipe do
// not interleave within a line.
//
//   torchrun_probe [--fail-rank R] [--fail-attempt A] [--exit-code C] [--hold S]
//   --fail-rank R     the worker with RANK R exits C (default 3) right after its first line,
//                     before the rendezvous (so the others wait there until they are stopped)
//   --fail-attempt A  ... only in attempt A (TORCHELASTIC_RESTART_COUNT; default: every attempt)
//   --hold S          every other worker sleeps S seconds after the rendezvous
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <chorus/collective/store/store_rendezvous.h>
#include <chorus/distribute/cluster_resolver.h>

namespace {

std::string env_or(const char* name, const char* fallback = "-") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

void say(const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const auto n = ::write(1, text.data(), text.size());
}

}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1, fail_attempt = -1, exit_code = 3, hold = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--fail-rank") fail_rank = value;
    if (flag == "--fail-attempt") fail_attempt = value;
    if (flag == "--exit-code") exit_code = value;
    if (flag == "--hold") hold = value;
  }
  try {
    const auto r = chorus::distribute::ClusterResolver::from_environment();
    std::string source = r.source();  // "torchrun environment" → one word
    for (char& c : source)
      if (c == ' ') c = '_';
    say("probe rank=" + env_or("RANK") + " world=" + env_or("WORLD_SIZE") + " local_rank=" + env_or("LOCAL_RANK") +
        " local_world=" + env_or("LOCAL_WORLD_SIZE") + " group_rank=" + env_or("GROUP_RANK") + " group_world=" +
        env_or("GROUP_WORLD_SIZE") + " master=" + env_or("MASTER_ADDR") + ":" + env_or("MASTER_PORT") +
        " restart=" + env_or("TORCHELASTIC_RESTART_COUNT") + " chorus_restart=" + env_or("CHORUS_RESTART_COUNT") +
        " extra=" + env_or("CHORUS_PROBE_EXTRA") + " resolver=" + source + ":" + std::to_string(r.worker_index()) +
        "/" + std::to_string(r.num_workers()) + "/" + std::to_string(r.restart_count()));
    if (r.worker_index() == fail_rank && (fail_attempt < 0 || r.restart_count() == fail_attempt)) return exit_code;
    auto rdzv =
        chorus::collective::store_rendezvous(chorus::distribute::store_rendezvous_options(r, std::chrono::seconds(60)));
    say("rdzv rank=" + std::to_string(rdzv.rank) + " size=" + std::to_string(rdzv.size) +
        " workers=" + std::to_string(rdzv.workers.size()) + " attempt=" + std::to_string(r.restart_count()));
    if (hold > 0) std::this_thread::sleep_for(std::chrono::seconds(hold));
    rdzv.leave(std::chrono::seconds(60));
  } catch (const std::exception& e) {
    say(std::string("probe error: ") + e.what());
    return 1;
  }
  return 0;
}
