#include <chorus/launch/agent_store.h>

#include <thread>

#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using internal::str_cat;

std::string cut(std::string text) {
  if (text.size() > AgentStore::kMaxWhatBytes) {
    text.resize(AgentStore::kMaxWhatBytes);
    text += "...";
  }
  return text;
}

}  // namespace

AgentStore::AgentStore(std::shared_ptr<collective::Store> store, int node_rank, int nnodes)
    : store_(std::move(store)), node_rank_(node_rank), nnodes_(nnodes) {
  CHORUS_REQUIRE(store_ != nullptr, InvalidArgumentError, "AgentStore: no store");
  CHORUS_REQUIRE(nnodes >= 1 && node_rank >= 0 && node_rank < nnodes, InvalidArgumentError, "AgentStore: node rank ",
                 node_rank, " is not a node of ", nnodes);
}

std::string AgentStore::key(std::string_view what) const { return str_cat("chorus-run/", what); }

void AgentStore::register_node(const std::string& job, std::chrono::milliseconds timeout) {
  const std::int64_t claims = store_->add(key(str_cat("node/", node_rank_)), 1);
  CHORUS_REQUIRE(claims == 1, InvalidArgumentError, "--node-rank ", node_rank_, " is claimed by ", claims,
                 " agents of the job at ", store_->describe(),
                 ": give every node its own --node-rank, 0..--nnodes-1 (or an earlier agent of this node still runs)");
  if (node_rank_ == 0) {
    store_->set(key("job"), job);
    return;
  }
  const std::string theirs = cut(store_->get(key("job"), timeout));
  CHORUS_REQUIRE(theirs == job, InvalidArgumentError, "node ", node_rank_, "'s agent has ", job, " but node 0's has ",
                 theirs, " (", store_->describe(),
                 "): every agent of a job needs the same --nnodes, --nproc-per-node and --max-restarts");
}

void AgentStore::arrive(int attempt) {
  store_->set(key(str_cat("join/", attempt, "/", node_rank_)), "1");
  store_->add(key(str_cat("join/", attempt)), 1);
}

bool AgentStore::joined(int attempt) { return store_->add(key(str_cat("join/", attempt)), 0) >= nnodes_; }

std::vector<int> AgentStore::missing(int attempt) {
  std::vector<int> out;
  for (int n = 0; n < nnodes_; ++n)
    if (!store_->check({key(str_cat("join/", attempt, "/", n))})) out.push_back(n);
  return out;
}

void AgentStore::report_failure(int attempt, bool restart, std::string_view what) {
  store_->set(key(str_cat(restart ? "restart/" : "fail/", attempt)), cut(std::string(what)));
}

void AgentStore::report_done(int attempt) { store_->add(key(str_cat("done/", attempt)), 1); }

AgentStore::Decision AgentStore::decision(int attempt) {
  for (const auto kind : {Decision::kFail, Decision::kRestart}) {
    const std::string k = key(str_cat(kind == Decision::kFail ? "fail/" : "restart/", attempt));
    if (store_->check({k})) return {kind, cut(store_->get(k, std::chrono::seconds(10)))};
  }
  if (store_->add(key(str_cat("done/", attempt)), 0) >= nnodes_) return {Decision::kDone, ""};
  return {};
}

std::vector<int> AgentStore::beat(std::chrono::milliseconds silence) {
  store_->add(key(str_cat("beat/", node_rank_)), 1);
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> silent;
  for (int n = 0; n < nnodes_; ++n) {
    if (n == node_rank_) continue;
    const std::int64_t v = store_->add(key(str_cat("beat/", n)), 0);
    auto [it, first] = beats_.try_emplace(n, Seen{v, now});
    if (!first && it->second.value != v) it->second = {v, now};
    if (now - it->second.since >= silence) silent.push_back(n);
  }
  return silent;
}

void AgentStore::leave(std::chrono::milliseconds timeout) {
  try {
    store_->add(key("left"), 1);
    if (node_rank_ != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (store_->add(key("left"), 0) < nnodes_ && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } catch (const Error&) {
    // The job is over: a store that is gone changes nothing.
  }
}

}  // namespace chorus::launch
