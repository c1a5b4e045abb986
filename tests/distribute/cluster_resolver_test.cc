// ClusterResolver (TF_CONFIG, mpirun's variables; the JSON reader itself: tests/core/json_test.cc), the
// process-to-device mapping and the GPU-claim check with fake inputs — no MPI, no GPU needed.
#include <chorus/distribute/cluster_resolver.h>

#include <gtest/gtest.h>

#include <map>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>

namespace chorus::distribute {
namespace {

using chorus::testing::message_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ClusterResolverTest, TfConfigWorkers) {
  auto r = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["host0:2222", "host0:2223", "host1:2222"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(r.source(), "TF_CONFIG");
  EXPECT_EQ(r.num_workers(), 3);
  EXPECT_EQ(r.worker_index(), 1);
  EXPECT_FALSE(r.is_chief());
  EXPECT_EQ(r.task_type(), "worker");
  EXPECT_EQ(r.task_id(), 1);
  EXPECT_EQ(r.local_rank(), 1);  // the second of the two workers on host0
  EXPECT_EQ(r.local_size(), 2);
  EXPECT_EQ(r.cluster_spec().num_tasks("worker"), 3);
  auto w0 = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_TRUE(w0.is_chief());  // no chief job: worker 0 is the chief
  EXPECT_EQ(w0.local_rank(), 0);
  EXPECT_EQ(w0.local_size(), 1);
}

TEST(ClusterResolverTest, TfConfigChiefIsWorkerZeroAndOtherJobsAreNotWorkers) {
  const std::string cluster =
      R"("cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "evaluator": ["e:1"], "ps": ["p:1"]})";
  auto chief = ClusterResolver::from_tf_config("{" + cluster + R"(, "task": {"type": "chief", "index": 0}})");
  EXPECT_EQ(chief.num_workers(), 3);
  EXPECT_EQ(chief.worker_index(), 0);
  EXPECT_TRUE(chief.is_chief());
  auto w1 = ClusterResolver::from_tf_config("{" + cluster + R"(, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(w1.worker_index(), 2);  // TF's order: chief, then workers
  EXPECT_FALSE(w1.is_chief());
  auto eval = ClusterResolver::from_tf_config("{" + cluster + R"(, "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(eval.worker_index(), -1);
  EXPECT_FALSE(eval.is_chief());
  EXPECT_EQ(eval.cluster_spec().num_tasks("ps"), 1);
}

TEST(ClusterResolverTest, TfConfigContentErrors) {
  auto err = [](const std::string& json) {
    return message_of<InvalidArgumentError>([&] { ClusterResolver::from_tf_config(json); });
  };
  EXPECT_TRUE(contains(err("[1]"), "must be a JSON object")) << err("[1]");
  EXPECT_TRUE(contains(err(R"({"task": {"type": "worker"}})"), "non-empty \"cluster\" object"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": "h:1"}, "task": {"type": "worker"}})"), "must be an array"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["h:1", "h:1"]}, "task": {"type": "worker"}})"),
                       "address \"h:1\" is listed twice"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["h:1"]}})"), "needs a \"task\" object"));
  const std::string m = err(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}})");
  EXPECT_TRUE(contains(m, "task.index 2 is out of range: job \"worker\" has 2 task(s) (valid: 0..1)")) << m;
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}})"),
                       "task.type \"chief\" is not a job of the cluster"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})"),
                       "non-negative integer"));
  EXPECT_TRUE(
      contains(err(R"({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief"}})"), "at most one is allowed"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps"}})"), "no \"chief\" or \"worker\""));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0})"),
                       "TF_CONFIG is not valid JSON at line 1, column 72: syntax error"));
  // Where it is wrong: the field, or the line and column.
  std::string m2 = err(R"({"cluster": {"worker": ["a:1", 7]}, "task": {"type": "worker"}})");
  EXPECT_TRUE(contains(m2, "TF_CONFIG: cluster.worker[1]: the tasks of a job must be non-empty")) << m2;
  EXPECT_TRUE(contains(m2, "got a number")) << m2;
  m2 = err(R"({"cluster": {"worker": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker"}})");
  EXPECT_TRUE(contains(m2, "key \"worker\" appears twice in object \"cluster\"")) << m2;
  m2 = err("{\"cluster\": {\"worker\": [\"a:1\"]},\n \"task\": {\"type\": \"worker\", \"index\": \"0\"}}");
  EXPECT_TRUE(contains(m2, "task.index must be a non-negative integer, got a string")) << m2;
  m2 = err("{\"cluster\": {\"worker\": [\"a:1\"]},\n \"task\": {\"type\": worker}}");
  EXPECT_TRUE(contains(m2, "TF_CONFIG is not valid JSON at line 2, column 19")) << m2;  // the w of worker
  // Bytes of the value reach the message only as escapes.
  m2 = err("{\"cluster\": {\"w\x1b[2J\": 1}}");
  EXPECT_TRUE(contains(m2, "U+001B")) << m2;
  EXPECT_EQ(m2.find('\x1b'), std::string::npos) << m2;
}

TEST(ClusterResolverTest, OpenMpiEnvironment) {
  auto r = ClusterResolver::from_mpi_launcher(fake_env({{"OMPI_COMM_WORLD_RANK", "3"},
                                                        {"OMPI_COMM_WORLD_SIZE", "4"},
                                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->source(), "Open MPI environment");
  EXPECT_EQ(r->num_workers(), 4);
  EXPECT_EQ(r->worker_index(), 3);
  EXPECT_EQ(r->local_rank(), 1);
  EXPECT_EQ(r->local_size(), 2);
  EXPECT_FALSE(r->is_chief());
  EXPECT_EQ(r->cluster_spec().jobs.at("worker").at(3), "mpi:rank3");
  auto chief =
      ClusterResolver::from_mpi_launcher(fake_env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(chief.has_value());
  EXPECT_TRUE(chief->is_chief());
  EXPECT_EQ(chief->local_rank(), 0);
  EXPECT_EQ(chief->local_size(), 1);
  auto pmi = ClusterResolver::from_mpi_launcher(
      fake_env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}}));
  ASSERT_TRUE(pmi.has_value());
  EXPECT_EQ(pmi->source(), "PMI environment");
  EXPECT_EQ(pmi->local_rank(), 1);
  EXPECT_FALSE(ClusterResolver::from_mpi_launcher(fake_env({})).has_value());
}

TEST(ClusterResolverTest, BadLauncherVariables) {
  auto err = [](std::map<std::string, std::string> vars) {
    return message_of<InvalidArgumentError>([&] { ClusterResolver::from_mpi_launcher(fake_env(vars)); });
  };
  std::string m = err({{"OMPI_COMM_WORLD_RANK", "x1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_TRUE(contains(m, "OMPI_COMM_WORLD_RANK='x1' is not a non-negative integer")) << m;
  m = err({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_TRUE(contains(m, "OMPI_COMM_WORLD_RANK=2 must be below OMPI_COMM_WORLD_SIZE=2")) << m;
  m = err({{"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_TRUE(contains(m, "OMPI_COMM_WORLD_RANK is not")) << m;
  m = err({{"OMPI_COMM_WORLD_RANK", "0"},
           {"OMPI_COMM_WORLD_SIZE", "2"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_TRUE(contains(m, "are inconsistent")) << m;
}

TEST(ClusterResolverTest, FromEnvironmentPrefersTfConfigThenLauncherThenOneWorker) {
  auto tf = ClusterResolver::from_environment(
      fake_env({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})"},
                {"OMPI_COMM_WORLD_RANK", "0"},
                {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(tf.source(), "TF_CONFIG");
  EXPECT_EQ(tf.worker_index(), 1);
  auto mpi = ClusterResolver::from_environment(
      fake_env({{"TF_CONFIG", ""}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(mpi.source(), "Open MPI environment");
  auto none = ClusterResolver::from_environment(fake_env({}));
  EXPECT_EQ(none.source(), "single process");
  EXPECT_EQ(none.num_workers(), 1);
  EXPECT_TRUE(none.is_chief());
  const std::string m = message_of<InvalidArgumentError>([] {
    ClusterResolver::from_environment(fake_env({{"TF_CONFIG", "{\"cluster\": "}}));
  });
  EXPECT_TRUE(contains(m, "TF_CONFIG is not valid JSON")) << m;
}

TEST(ClusterResolverTest, MoreMalformedTfConfigs) {
  auto err = [](const std::string& json) {
    return message_of<InvalidArgumentError>([&] { ClusterResolver::from_tf_config(json); });
  };
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": [""]}, "task": {"type": "worker"}})"), "non-empty"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": [0]})"), "needs a \"task\" object"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}})"), "task.type must be a string"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.5}})"),
                       "non-negative integer"));
  EXPECT_TRUE(
      contains(err(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1e300}})"), "out of range"));
  EXPECT_TRUE(contains(err(""), "TF_CONFIG is not valid JSON"));
  EXPECT_TRUE(contains(err(std::string(100000, '[')), "TF_CONFIG"));  // deep nesting: an error, not a crash
}

TEST(ClusterResolverTest, TfConfigNamesTheChiefAsTheStore) {
  auto chief = ClusterResolver::from_tf_config(
      R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2223", "[fe80::1]:2224"]}, "task": {"type": "worker", "index": 1}})");
  ASSERT_TRUE(chief.store_address().has_value());
  EXPECT_EQ(chief.store_address()->host, "c0");
  EXPECT_EQ(chief.store_address()->port, 2222);
  EXPECT_EQ(chief.worker_addresses(), (std::vector<std::string>{"c0:2222", "w0:2223", "[fe80::1]:2224"}));
  auto opts = store_rendezvous_options(chief, std::chrono::seconds(7));
  EXPECT_EQ(opts.rank, 2);
  EXPECT_EQ(opts.world_size, 3);
  EXPECT_EQ(opts.store_host, "c0");
  EXPECT_EQ(opts.store_port, 2222);
  EXPECT_EQ(opts.addresses.size(), 3u);
  EXPECT_EQ(opts.attempt, "0");
  EXPECT_EQ(opts.timeout, std::chrono::seconds(7));
  auto v6 = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["[fe80::1]:2224", "b:1"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(v6.store_address()->host, "fe80::1");
  EXPECT_EQ(v6.store_address()->to_string(), "[fe80::1]:2224");
  // A chief address without a usable port: parsed as before, but there is no store to meet at.
  auto no_port = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["a", "b:1"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_FALSE(no_port.store_address().has_value());
  const std::string m =
      message_of<InvalidArgumentError>([&] { store_rendezvous_options(no_port, std::chrono::seconds(1)); });
  EXPECT_TRUE(contains(m, "\"a\" in TF_CONFIG has no port")) << m;
  auto eval = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}})");
  EXPECT_THROW(store_rendezvous_options(eval, std::chrono::seconds(1)), InvalidArgumentError);
}

TEST(ClusterResolverTest, TorchrunEnvironment) {
  auto r = ClusterResolver::from_torchrun(fake_env({{"RANK", "5"},
                                                    {"WORLD_SIZE", "8"},
                                                    {"LOCAL_RANK", "1"},
                                                    {"LOCAL_WORLD_SIZE", "4"},
                                                    {"MASTER_ADDR", "10.0.0.1"},
                                                    {"MASTER_PORT", "29500"},
                                                    {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->source(), "torchrun environment");
  EXPECT_EQ(r->num_workers(), 8);
  EXPECT_EQ(r->worker_index(), 5);
  EXPECT_EQ(r->local_rank(), 1);
  EXPECT_EQ(r->local_size(), 4);
  EXPECT_EQ(r->restart_count(), 2);
  ASSERT_TRUE(r->store_address().has_value());
  EXPECT_EQ(r->store_address()->to_string(), "10.0.0.1:29500");
  EXPECT_TRUE(r->worker_addresses().empty());
  auto o = store_rendezvous_options(*r, std::chrono::seconds(3));
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.world_size, 8);
  EXPECT_EQ(o.store_host, "10.0.0.1");
  EXPECT_EQ(o.store_port, 29500);
  EXPECT_EQ(o.attempt, "2");
  EXPECT_FALSE(r->agent_serves_store());
  EXPECT_TRUE(o.serve);  // rank 0 serves the store (torchrun's default)
  // TORCHELASTIC_USE_AGENT_STORE=True (chorus-run across nodes, torchrun's agent): rank 0 connects.
  for (const char* yes : {"True", "true", "1"}) {
    auto agent = ClusterResolver::from_torchrun(fake_env({{"RANK", "0"},
                                                          {"WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "10.0.0.1"},
                                                          {"MASTER_PORT", "29500"},
                                                          {"TORCHELASTIC_USE_AGENT_STORE", yes}}));
    ASSERT_TRUE(agent.has_value());
    EXPECT_TRUE(agent->agent_serves_store()) << yes;
    EXPECT_FALSE(store_rendezvous_options(*agent, std::chrono::seconds(1)).serve) << yes;
  }
  auto no_agent = ClusterResolver::from_torchrun(fake_env({{"RANK", "0"},
                                                           {"WORLD_SIZE", "2"},
                                                           {"MASTER_ADDR", "10.0.0.1"},
                                                           {"MASTER_PORT", "29500"},
                                                           {"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  ASSERT_TRUE(no_agent.has_value());
  EXPECT_FALSE(no_agent->agent_serves_store());
  // One process: MASTER_* may be absent.
  auto one = ClusterResolver::from_torchrun(fake_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(one.has_value());
  EXPECT_FALSE(one->store_address().has_value());
  EXPECT_EQ(store_rendezvous_options(*one, std::chrono::seconds(1)).world_size, 1);
  EXPECT_FALSE(ClusterResolver::from_torchrun(fake_env({{"MASTER_ADDR", "x"}})).has_value());
  // Order: TF_CONFIG, then the MPI launcher, then torchrun.
  auto env = fake_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(ClusterResolver::from_environment(env).source(), "torchrun environment");
  auto mpi = ClusterResolver::from_environment(
      fake_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}}));
  EXPECT_EQ(mpi.source(), "Open MPI environment");
}

TEST(ClusterResolverTest, MalformedTorchrunVariablesAreNamed) {
  auto err = [](std::map<std::string, std::string> vars) {
    return message_of<InvalidArgumentError>([&] { ClusterResolver::from_torchrun(fake_env(vars)); });
  };
  const std::map<std::string, std::string> good = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto vars = good;
    vars[k] = v;
    return vars;
  };
  auto without = [&](const std::string& k) {
    auto vars = good;
    vars.erase(k);
    return vars;
  };
  std::string m = err(with("RANK", "one"));
  EXPECT_TRUE(contains(m, "RANK='one' is not a non-negative integer")) << m;
  EXPECT_TRUE(contains(m, "torchrun")) << m;
  m = err(with("WORLD_SIZE", "2.0"));
  EXPECT_TRUE(contains(m, "WORLD_SIZE='2.0'")) << m;
  m = err(with("RANK", "-1"));
  EXPECT_TRUE(contains(m, "RANK='-1'")) << m;
  m = err(with("RANK", "99999999999999999999"));
  EXPECT_TRUE(contains(m, "RANK='99999999999999999999'")) << m;
  m = err(with("RANK", "2"));
  EXPECT_TRUE(contains(m, "RANK=2 must be below WORLD_SIZE=2")) << m;
  m = err(with("WORLD_SIZE", "0"));
  EXPECT_TRUE(contains(m, "must be below WORLD_SIZE=0")) << m;
  m = err(without("MASTER_PORT"));
  EXPECT_TRUE(contains(m, "MASTER_PORT is not set but WORLD_SIZE=2")) << m;
  m = err(without("MASTER_ADDR"));
  EXPECT_TRUE(contains(m, "MASTER_ADDR is not set")) << m;
  m = err(with("MASTER_ADDR", ""));
  EXPECT_TRUE(contains(m, "MASTER_ADDR is empty")) << m;
  for (const char* port : {"0", "65536", "http", "", "29500x", "-1"}) {
    m = err(with("MASTER_PORT", port));
    EXPECT_TRUE(contains(m, std::string("MASTER_PORT='") + port + "' is not a TCP port")) << m;
  }
  m = err(without("RANK"));
  EXPECT_TRUE(contains(m, "WORLD_SIZE is set but RANK is not")) << m;
  m = err(without("WORLD_SIZE"));
  EXPECT_TRUE(contains(m, "RANK is set but WORLD_SIZE is not")) << m;
  auto local = with("LOCAL_RANK", "3");
  local["LOCAL_WORLD_SIZE"] = "2";
  m = err(local);
  EXPECT_TRUE(contains(m, "LOCAL_RANK=3 and LOCAL_WORLD_SIZE=2 are inconsistent")) << m;
  m = err(with("LOCAL_WORLD_SIZE", "3"));  // more local workers than workers
  EXPECT_TRUE(contains(m, "inconsistent")) << m;
  m = err(with("TORCHELASTIC_RESTART_COUNT", "again"));
  EXPECT_TRUE(contains(m, "TORCHELASTIC_RESTART_COUNT='again'")) << m;
  // Through from_environment too: no fallback to one worker.
  EXPECT_THROW(ClusterResolver::from_environment(fake_env(without("MASTER_PORT"))), InvalidArgumentError);
}

TEST(ClusterResolverTest, TorchrunVariablesThatDisagreeWithTfConfigAreNamed) {
  const std::string tf = R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})";
  std::string m = message_of<InvalidArgumentError>([&] {
    ClusterResolver::from_environment(fake_env({{"TF_CONFIG", tf}, {"WORLD_SIZE", "3"}}));
  });
  EXPECT_TRUE(contains(m, "WORLD_SIZE=3 disagrees with TF_CONFIG, whose cluster has 2 workers")) << m;
  m = message_of<InvalidArgumentError>([&] {
    ClusterResolver::from_environment(fake_env({{"TF_CONFIG", tf}, {"RANK", "0"}}));
  });
  EXPECT_TRUE(contains(m, "RANK=0 disagrees with TF_CONFIG")) << m;
  auto agree = ClusterResolver::from_environment(fake_env({{"TF_CONFIG", tf}, {"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(agree.source(), "TF_CONFIG");
  EXPECT_EQ(agree.store_address()->to_string(), "a:1");
}

LogicalDevice dev(const std::string& type, int index, int physical) {
  LogicalDevice d;
  d.device_type = type;
  d.index = index;
  d.name = "/job:localhost/replica:0/task:0/device:" + type + ":" + std::to_string(index);
  d.physical_index = physical;
  d.physical_name = "/physical_device:" + type + ":" + std::to_string(physical);
  return d;
}

TEST(WorkerDevicesTest, LocalRankGpuTakesTheVirtualGpusOfItsPhysicalGpu) {
  // GPU:0 and GPU:1 carved from physical GPU 0, GPU:2 and GPU:3 from physical GPU 1.
  std::vector<LogicalDevice> devices{dev("CPU", 0, 0), dev("GPU", 0, 0), dev("GPU", 1, 0), dev("GPU", 2, 1),
                                     dev("GPU", 3, 1)};
  auto mine = select_worker_devices(devices, 1, WorkerDevicePolicy::kAuto, 1);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0], devices[3].name);
  EXPECT_EQ(mine[1], devices[4].name);
  EXPECT_EQ(select_worker_devices(devices, 2, WorkerDevicePolicy::kLocalRankGpu, 1)[0], devices[1].name);  // 2 mod 2
  EXPECT_EQ(select_worker_devices(devices, 0, WorkerDevicePolicy::kAllLocalGpus, 1).size(), 4u);
  EXPECT_EQ(select_worker_devices(devices, 0, WorkerDevicePolicy::kCpu, 1), std::vector<std::string>{devices[0].name});
}

TEST(WorkerDevicesTest, CpuDevicesAndErrors) {
  std::vector<LogicalDevice> cpus{dev("CPU", 0, 0), dev("CPU", 1, 0), dev("CPU", 2, 0)};
  EXPECT_EQ(select_worker_devices(cpus, 5, WorkerDevicePolicy::kAuto, 1).size(), 1u);
  auto two = select_worker_devices(cpus, 0, WorkerDevicePolicy::kCpu, 2);
  EXPECT_EQ(two, (std::vector<std::string>{cpus[0].name, cpus[1].name}));
  std::string m =
      message_of<InvalidArgumentError>([&] { select_worker_devices(cpus, 0, WorkerDevicePolicy::kCpu, 4); });
  EXPECT_TRUE(contains(m, "cpu_devices_per_worker = 4 but this process has 3 logical CPU device(s)")) << m;
  m = message_of<InvalidArgumentError>([&] { select_worker_devices(cpus, 0, WorkerDevicePolicy::kLocalRankGpu, 1); });
  EXPECT_TRUE(contains(m, "needs a GPU, but this process has none")) << m;
}

TEST(GpuClaimsTest, TwoRanksOnOneGpuOfOneHostAreNamed) {
  check_unique_gpus({{0, "node7", {"0000:19:00.0"}}, {1, "node7", {"0000:3b:00.0"}}, {2, "node8", {"0000:19:00.0"}}});
  const std::string m = message_of<InvalidArgumentError>([] {
    check_unique_gpus({{0, "node7", {"0000:19:00.0"}}, {1, "node8", {"0000:19:00.0"}}, {2, "node7", {"0000:19:00.0"}}});
  });
  EXPECT_TRUE(contains(m, "ranks 0 and 2 both use GPU 0000:19:00.0 on host node7")) << m;
  // Virtual GPUs of one process on one physical GPU are one claim, not a conflict.
  check_unique_gpus({{0, "n", {"0000:19:00.0", "0000:19:00.0"}}});
}

}  // namespace
}  // namespace chorus::distribute
