// How chorus-run knows how every rank ended, whatever mpirun says.
//
// mpirun's own exit status is not enough: under `mpirun --enable-recovery` (elastic set-ups) it
// exits 0 after a rank was killed, and a job that failed looks like one that succeeded. So
// chorus-run starts each rank under itself as a tiny wrapper:
//
//   mpirun ... -- /path/chorus-run --record-exit-status DIR -- program args...
//
// The wrapper runs the program as its child (PATH searched, as mpirun would), forwards the signals
// mpirun sends (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT), and when the program
// ends writes DIR/rank-<R> ("exit 3" or "signal 9"; R from OMPI_COMM_WORLD_RANK or PMI_RANK) and
// ends the same way: the same exit status, or the same signal (without a core dump of its own).
// The program dies with the wrapper (PR_SET_PDEATHSIG). chorus-run made DIR before starting mpirun;
// after mpirun it reads the records (judge_job) and removes DIR unless the user gave it.
//
// DIR must be visible to every rank: chorus-run wraps the ranks when they all run on this machine
// (no -H) or when --status-dir names a directory (a shared file system for several hosts).
//
// Thread-safety: the record functions are pure or touch only DIR; run_rank_and_record is a
// process's main work (it installs signal handlers, see launch/process.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::launch {

// The wrapper's flag (chorus-run --record-exit-status DIR -- program args).
inline constexpr std::string_view kRecordExitStatusFlag = "--record-exit-status";

// How one rank ended.
struct RankExit {
  std::string rank;  // "0", "1", ... or "pid-<pid>" when no launcher variable named it
  bool signaled = false;
  int code = 0;  // the exit status, or the signal number when signaled
  bool ok() const { return !signaled && code == 0; }
  int status() const { return signaled ? 128 + code : code; }
  // "rank 1 was killed by signal 9 (SIGKILL)", "rank 0 exited with status 1"
  std::string describe() const;
};

// A record's text ("exit 3\n", "signal 9\n") and back; nullopt for anything else.
std::string format_exit_record(const RankExit& exit);
std::optional<RankExit> parse_exit_record(std::string_view rank, std::string_view text);

// Every record in `dir` (files named rank-<R>), ordered by rank (numbers first, numerically). A
// file that is not a record is reported as a rank that "exited with status 255" rather than
// ignored (a torn write means the wrapper did not finish).
std::vector<RankExit> read_exit_records(const std::string& dir);

// The wrapper's whole job (see above). Returns the program's exit status when the wrapper did not
// end by re-raising the program's signal. A record that cannot be written is reported on stderr;
// the exit status stays the program's.
int run_rank_and_record(const std::string& dir, const std::vector<std::string>& program);

// chorus-run's exit status and what it prints (each line on stderr) after mpirun ended with
// `mpirun_status` (128 + signal when mpirun was killed):
//   - every rank that did not exit 0 is described, in rank order;
//   - with `expect_every_rank` (the records are trusted: DIR is visible to all ranks), ranks
//     0..num_processes-1 without a record are named as failed too ("left no exit status");
//   - the status is mpirun's when it is non-zero; else the first failed rank's status
//     (128 + signal for a signal), else 1 for a missing record, else 0.
struct JobVerdict {
  int exit_status = 0;
  std::vector<std::string> lines;
};
JobVerdict judge_job(int mpirun_status, const std::vector<RankExit>& records, int num_processes,
                     bool expect_every_rank);

}  // namespace chorus::launch
