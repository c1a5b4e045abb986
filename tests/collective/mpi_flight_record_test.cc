// Flight records under mpirun (issue 39, item 3): with CHORUS_FLIGHT_RECORD_DIR set to argv[1],
// rank 1 comes 2 s late to all_reduce #5 that rank 0 waits in with a 500 ms timeout. Rank 0 times
// out; rank 1 learns it from rank 0's notice when it arrives. Each rank must then have written
// <dir>/flight-<rank>.json: valid JSON listing all_reduce #0..#4 as completed (timed, oldest first)
// and all_reduce #5 as the failing call, named by the error it threw. Prints "[rank R] PASS ..." or
// "[rank R] FAIL: why" and exits non-zero on FAIL.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include <chorus/collective/mpi/mpi.h>
#include <chorus/core/error.h>
#include <chorus/core/tensor.h>

namespace cx = chorus;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("FAIL: usage: %s <flight record dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  setenv("CHORUS_FLIGHT_RECORD_DIR", dir.c_str(), 1);
  int rc = 0;
  {
    cx::collective::MpiEnvironment mpi;
    const int rank = mpi.world_rank();
    const std::string path = dir + "/flight-" + std::to_string(rank) + ".json";
    ::unlink(path.c_str());  // a previous run's
    auto comm = cx::collective::make_mpi_communicator();
    cx::Tensor t = cx::Tensor::full({16}, 1.0f);
    for (int i = 0; i < 5; ++i) comm->all_reduce(t, t)->wait();  // #0 .. #4
    if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::string why, error;
    try {
      comm->all_reduce(t, t, {.timeout = std::chrono::milliseconds(rank == 0 ? 500 : 10000)})->wait();
      why += " all_reduce #5 completed;";
    } catch (const cx::Error& e) {
      error = e.what();
    }
    if (error.find("Flight record: " + path) == std::string::npos) why += " the error does not name " + path + ";";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    try {
      const auto doc = nlohmann::json::parse(text.str());
      const auto& rec = doc.at("chorus_flight_record");
      if (rec.at("rank") != rank) why += " wrong rank;";
      if (rec.at("failing_call").at("call").get<std::string>().rfind("all_reduce #5", 0) != 0)
        why += " the failing call is not all_reduce #5;";
      const auto& done = rec.at("completed");
      if (done.size() != 5) why += " not 5 completed calls;";
      for (std::size_t i = 0; i < done.size(); ++i) {
        if (done[i].at("call").get<std::string>().rfind("all_reduce #" + std::to_string(i), 0) != 0)
          why += " completed[" + std::to_string(i) + "] is " + done[i].at("call").get<std::string>() + ";";
        if (done[i].at("end_us").get<std::int64_t>() < done[i].at("start_us").get<std::int64_t>() ||
            done[i].at("start_us").get<std::int64_t>() <= 0)
          why += " completed[" + std::to_string(i) + "] is not timed;";
      }
      if (doc.at("traceEvents").size() < 6) why += " fewer than 6 trace events;";
    } catch (const std::exception& e) {
      why += std::string(" ") + path + " is not a flight record: " + e.what() + ";";
    }
    std::printf("[rank %d] %s %s\n", rank, why.empty() ? "PASS" : ("FAIL:" + why).c_str(), error.c_str());
    std::fflush(stdout);
    rc = why.empty() ? 0 : 1;
  }
  return rc;
}
