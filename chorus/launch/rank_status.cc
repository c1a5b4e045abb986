#include <chorus/launch/rank_status.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/launch/process.h>

namespace chorus::launch {
namespace {

using internal::str_cat;
namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "rank-";

std::optional<int> parse_int(std::string_view text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// The rank's name: mpirun's variables, else this process's id.
std::string rank_name() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(var);
    if (v && parse_int(v) && *parse_int(v) >= 0) return v;
  }
  return str_cat("pid-", ::getpid());
}

// Numbers first (numerically), then the rest by name.
bool rank_less(const RankExit& a, const RankExit& b) {
  const auto x = parse_int(a.rank), y = parse_int(b.rank);
  if (x && y) return *x < *y;
  if (x || y) return x.has_value();
  return a.rank < b.rank;
}

}  // namespace

std::string RankExit::describe() const {
  if (!signaled) return str_cat("rank ", rank, " exited with status ", code);
  const char* name = sigabbrev_np(code);
  return str_cat("rank ", rank, " was killed by signal ", code, name ? str_cat(" (SIG", name, ")") : std::string());
}

std::string format_exit_record(const RankExit& exit) {
  return str_cat(exit.signaled ? "signal " : "exit ", exit.code, "\n");
}

std::optional<RankExit> parse_exit_record(std::string_view rank, std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  RankExit out;
  out.rank = std::string(rank);
  std::string_view number;
  if (text.rfind("exit ", 0) == 0) {
    number = text.substr(5);
  } else if (text.rfind("signal ", 0) == 0) {
    out.signaled = true;
    number = text.substr(7);
  } else {
    return std::nullopt;
  }
  const auto n = parse_int(number);
  if (!n || *n < 0 || *n > 255) return std::nullopt;
  out.code = *n;
  return out;
}

std::vector<RankExit> read_exit_records(const std::string& dir) {
  std::vector<RankExit> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;  // the wrapper's temporary files start with '.'
    const std::string rank = name.substr(kPrefix.size());
    // A record is a few bytes: read at most 256 of a regular file. A FIFO or device planted under
    // a record's name is never opened for a blocking read (io::File::open_for_read refuses it); it
    // counts as a rank whose end is unknown.
    std::string text;
    try {
      io::File in = io::File::open_for_read(entry.path().string());
      text.resize(256);
      text.resize(in.read(text.data(), text.size()));
    } catch (const Error&) {
      text.clear();
    }
    if (auto record = parse_exit_record(rank, text))
      out.push_back(*record);
    else
      out.push_back({rank, false, 255});
  }
  std::sort(out.begin(), out.end(), rank_less);
  return out;
}

int run_rank_and_record(const std::string& dir, const std::vector<std::string>& program) {
  CHORUS_REQUIRE(!program.empty() && !program[0].empty(), InvalidArgumentError, kRecordExitStatusFlag, " ", dir,
                 ": no program to run after '--'");
  RankExit exit;
  exit.rank = rank_name();
  // The child dies with this wrapper: if mpirun kills the wrapper, the program must not live on.
  const ChildExit child = run_child(program, {.search_path = true, .parent_death_signal = SIGKILL});
  exit.signaled = child.signaled;
  exit.code = child.code;

  // Written whole under a temporary name nobody can predict (created O_EXCL | O_NOFOLLOW), then
  // renamed: a record is complete or absent, and a link or FIFO planted in the directory is never
  // written through or replaced (io::replace_file).
  const std::string path = str_cat(dir, "/", kPrefix, exit.rank);
  try {
    io::replace_file(path, format_exit_record(exit), /*durable=*/false,
                     io::temporary_name(str_cat(dir, "/.", kPrefix, exit.rank), ".tmp-"));
  } catch (const std::exception& e) {
    std::cerr << "chorus-run: cannot record how rank " << exit.rank << " ended in " << dir << ": " << e.what() << "\n";
  }
  if (exit.signaled) {
    // End like the program: the same signal, so mpirun reports what really happened. No core
    // file of the wrapper (the program wrote its own, if any).
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(exit.code, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, exit.code);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(exit.code);
  }
  return exit.status();  // an exit code, or a signal that does not end a process (e.g. SIGCONT)
}

JobVerdict judge_job(int mpirun_status, const std::vector<RankExit>& records, int num_processes,
                     bool expect_every_rank) {
  JobVerdict v;
  std::vector<const RankExit*> failed;
  std::map<int, bool> seen;
  for (const auto& r : records) {
    if (!r.ok()) failed.push_back(&r);
    if (const auto n = parse_int(r.rank)) seen[*n] = true;
  }
  for (const RankExit* r : failed) v.lines.push_back("chorus-run: " + r->describe());
  std::string missing;
  int missing_count = 0;
  if (expect_every_rank) {
    for (int r = 0; r < num_processes; ++r) {
      if (seen.count(r)) continue;
      missing += str_cat(missing.empty() ? "" : ", ", r);
      ++missing_count;
    }
    if (missing_count > 0)
      v.lines.push_back(
          str_cat("chorus-run: rank", missing_count == 1 ? " " : "s ", missing,
                  " left no exit status (killed together with its chorus-run wrapper, or never started)"));
  }
  if (mpirun_status != 0)
    v.exit_status = mpirun_status;
  else if (!failed.empty())
    v.exit_status = failed.front()->status();
  else if (missing_count > 0)
    v.exit_status = 1;
  if (mpirun_status == 0 && v.exit_status != 0)
    v.lines.push_back(
        str_cat("chorus-run: mpirun exited with status 0 although the job failed (as mpirun "
                "--enable-recovery does); exiting with status ",
                v.exit_status));
  return v;
}

}  // namespace chorus::launch
