#include <chorus/launch/agent_store.h>

#include <algorithm>
#include <charconv>
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

AgentStore::AgentStore(std::shared_ptr<collective::Store> store, int node_rank, int nnodes, int min_nodes)
    : store_(std::move(store)),
      node_rank_(node_rank),
      nnodes_(nnodes),
      min_nodes_(min_nodes == 0 ? nnodes : min_nodes) {
  CHORUS_REQUIRE(store_ != nullptr, InvalidArgumentError, "AgentStore: no store");
  CHORUS_REQUIRE(nnodes >= 1 && node_rank >= 0 && node_rank < nnodes, InvalidArgumentError, "AgentStore: node rank ",
                 node_rank, " is not a node of ", nnodes);
  CHORUS_REQUIRE(min_nodes_ >= 1 && min_nodes_ <= nnodes, InvalidArgumentError, "AgentStore: at least ", min_nodes,
                 " of ", nnodes, " nodes is not a range");
  for (int n = 0; n < nnodes; ++n) members_.push_back(n);
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

std::optional<std::vector<int>> AgentStore::members(int attempt, std::chrono::milliseconds last_call) {
  const std::string list_key = key(str_cat("members/", attempt));
  if (node_rank_ == 0 && !store_->check({list_key})) {
    const std::int64_t arrived = store_->add(key(str_cat("join/", attempt)), 0);
    if (arrived < min_nodes_) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    if (quorum_attempt_ != attempt) {
      quorum_attempt_ = attempt;
      quorum_since_ = now;
    }
    if (arrived < nnodes_ && now - *quorum_since_ < last_call) return std::nullopt;
    std::string list;
    for (int n = 0; n < nnodes_; ++n)
      if (store_->check({key(str_cat("join/", attempt, "/", n))})) list += str_cat(list.empty() ? "" : ",", n);
    store_->set(list_key, list);
  }
  if (!store_->check({list_key})) return std::nullopt;
  const std::string text = cut(store_->get(list_key, std::chrono::seconds(10)));
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    int n = -1;
    const auto [end, ec] = std::from_chars(text.data() + at, text.data() + comma, n);
    CHORUS_REQUIRE(
        ec == std::errc() && end == text.data() + comma && n >= 0 && n < nnodes_ && (out.empty() || n > out.back()),
        DataLossError, "chorus-run: the members of attempt ", attempt, " in ", store_->describe(), " are '", text,
        "', not ascending node ranks 0..", nnodes_ - 1, " (another program writes to the store?)");
    out.push_back(n);
    at = comma + 1;
  }
  members_ = out;
  beats_.clear();
  return out;
}

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
  if (store_->add(key(str_cat("done/", attempt)), 0) >= static_cast<std::int64_t>(members_.size()))
    return {Decision::kDone, ""};
  return {};
}

std::vector<int> AgentStore::beat(std::chrono::milliseconds silence) {
  store_->add(key(str_cat("beat/", node_rank_)), 1);
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> silent;
  for (int n : members_) {
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
    store_->set(key(str_cat("left/", node_rank_)), "");
    if (node_rank_ != 0) return;
    // The members only, by name: the agents of nodes that are not members (lost, or too late) may
    // never come to leave, or may leave too and must not stand in for a member still reading.
    std::vector<std::string> keys;
    for (int n : members_) keys.push_back(key(str_cat("left/", n)));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!store_->check(keys) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } catch (const Error&) {
    // The job is over: a store that is gone changes nothing.
  }
}

}  // namespace chorus::launch
