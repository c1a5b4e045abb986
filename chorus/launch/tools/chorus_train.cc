// chorus-train: trains a built-in model (mlp or the seed CNN) on digits under a chosen strategy.
// Flags: launch/train_options.h (`chorus-train --help`); the job: launch/trainer.h; guide:
// docs/launch.md. Works alone and under chorus-run/mpirun.
//
// Exit status: 0 trained (and reached --min-accuracy), or preempted (SIGTERM with --checkpoint-dir:
// every worker backed up the same step; rerun to continue); 1 a training error or an accuracy
// below --min-accuracy, 2 a bad command line.
#include <iostream>

#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/core/error.h>
#include <chorus/launch/cli.h>
#include <chorus/launch/train_options.h>
#include <chorus/launch/trainer.h>

namespace cx = chorus;
namespace launch = chorus::launch;

int main(int argc, char** argv) {
  launch::TrainOptions options;
  try {
    options = launch::parse_train_options(argc, argv);
  } catch (const cx::InvalidArgumentError& e) {
    launch::print_error("chorus-train", e.message(), "Run 'chorus-train --help' for the flags.");
    return 2;
  }
  if (options.help) {
    std::cout << launch::train_usage();
    return 0;
  }
  if (options.version) {
    std::cout << launch::version_text("chorus-train");
    return 0;
  }
  std::cout << std::unitbuf;  // progress lines in order with log lines on stderr
  try {
    const launch::TrainResult result = launch::train(options, std::cout);
    if (result.preempted) return 0;  // backed up; the rerun continues
    if (result.accuracy < options.min_accuracy) {
      launch::print_error("chorus-train", cx::internal::str_cat("held-out accuracy ", result.accuracy,
                                                                " is below --min-accuracy ", options.min_accuracy));
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    // A goodbye still to be said (at exit) tells the other workers why this one leaves.
    cx::collective::set_process_failure(e.what());
    launch::print_error("chorus-train", e.what());
    return 1;
  }
}
