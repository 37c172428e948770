#include "dist_autograd/context.h"

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "dist_autograd/backward_pass.h"
#include "dist_autograd/send_recv_backward.h"
#include "rpc/rpc.h"

namespace distgrad::dist_autograd {

using autograd::Node;
namespace {

constexpr int kWorkerIdShift = 48;
constexpr int kIncarnationShift = 40;
constexpr int64_t kCounterMask = (int64_t{1} << kIncarnationShift) - 1;

thread_local ContextScope::ThreadState thread_state;

}  // namespace

void DistAutogradContext::add_send(int64_t message_id, std::shared_ptr<SendBackward> send) {
  std::lock_guard<std::mutex> lock(mutex_);
  sends_[message_id] = std::move(send);
}

void DistAutogradContext::add_recv(int64_t message_id, std::shared_ptr<RecvBackward> recv) {
  std::lock_guard<std::mutex> lock(mutex_);
  recvs_[message_id] = std::move(recv);
}

std::shared_ptr<SendBackward> DistAutogradContext::send(int64_t message_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sends_.find(message_id);
  DISTGRAD_CHECK(it != sends_.end(), "distributed autograd: context ", id_, " has no send function for message ",
                 message_id, " on ", rpc::get_worker_name());
  return it->second;
}

std::vector<std::shared_ptr<Node>> DistAutogradContext::send_functions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<Node>> sends;
  for (const auto& [message_id, send] : sends_) sends.push_back(send);
  return sends;
}

size_t DistAutogradContext::num_recv_functions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return recvs_.size();
}

void DistAutogradContext::add_worker(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  workers_.insert(rank);
}

std::set<int> DistAutogradContext::workers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return workers_;
}

void DistAutogradContext::add_to(LeafGradients& gradients, const Tensor& leaf, const Tensor& grad) {
  // Kept without a copy: the engine never writes a gradient in place once it is handed over, and
  // later ones are added out of place, so the maps may share the first (accumulate_grad copies a
  // shared tensor before it adds into .grad in place).
  auto [entry, inserted] = gradients.try_emplace(leaf.autograd_meta(), LeafGradient{leaf, grad});
  if (inserted) return;
  Tensor& sum = entry->second.grad;
  if (sum.requires_grad() || grad.requires_grad()) {
    // Gradients of a pass with create_graph: their sum is recorded too (Note [Differentiable
    // gradient messages]).
    const autograd::EnableGradGuard recorded;
    sum = sum + grad;
  } else {
    sum = untracked::add(sum, grad);
  }
}

void DistAutogradContext::accumulate(const Tensor& leaf, const Tensor& grad, const RunOrder& run) {
  if (!grad.defined()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  add_to(pass_runs_[run], leaf, grad);
}

DistAutogradContext::LeafGradients DistAutogradContext::pass_sum() const {
  LeafGradients sum;
  for (const auto& [run, gradients] : pass_runs_) {
    for (const auto& [key, entry] : gradients) add_to(sum, entry.leaf, entry.grad);
  }
  return sum;
}

DistAutogradContext::LeafGradients DistAutogradContext::fold_pass() {
  LeafGradients sum = pass_sum();
  pass_runs_.clear();
  for (const auto& [key, entry] : sum) add_to(gradients_, entry.leaf, entry.grad);
  return sum;
}

std::vector<LeafGradient> DistAutogradContext::gradients() const {
  std::lock_guard<std::mutex> lock(mutex_);
  LeafGradients all = gradients_;
  for (const auto& [key, entry] : pass_sum()) add_to(all, entry.leaf, entry.grad);
  std::vector<LeafGradient> result;
  for (auto& [key, entry] : all) result.push_back(std::move(entry));
  return result;
}

std::shared_ptr<BackwardPass> DistAutogradContext::begin_pass(int64_t pass_id, PassOptions options) {
  std::lock_guard<std::mutex> lock(mutex_);
  DISTGRAD_CHECK(!driving_pass_, "backward: a backward pass of context ", id_,
                 " is already running (one pass per context at a time)");
  driving_pass_ = true;
  fold_pass();  // gradients a pass begun elsewhere brought here
  pass_ = std::make_shared<BackwardPass>(pass_id, options);
  return pass_;
}

std::shared_ptr<BackwardPass> DistAutogradContext::join_pass(int64_t pass_id, PassOptions options) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pass_ == nullptr || pass_->id() != pass_id) {
    fold_pass();
    pass_ = std::make_shared<BackwardPass>(pass_id, options);
  }
  return pass_;
}

std::shared_ptr<BackwardPass> DistAutogradContext::pass() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pass_;
}

std::vector<LeafGradient> DistAutogradContext::end_pass() {
  std::lock_guard<std::mutex> lock(mutex_);
  driving_pass_ = false;
  pass_ = nullptr;
  std::vector<LeafGradient> result;
  for (auto& [key, entry] : fold_pass()) result.push_back(std::move(entry));
  return result;
}

bool DistAutogradContext::mark_pass_released(int64_t pass_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return released_passes_.insert(pass_id).second;
}

ContextContainer& ContextContainer::instance() {
  static auto* container = new ContextContainer;  // never destroyed: contexts may outlive main
  return *container;
}

int64_t ContextContainer::worker_prefix() const {
  return int64_t{rpc::get_rank()} << kWorkerIdShift | (rpc::incarnation() & 0xff) << kIncarnationShift;
}

ContextPtr ContextContainer::create() {
  const int64_t id = worker_prefix() | (next_context_.fetch_add(1) & kCounterMask);
  auto context = std::make_shared<DistAutogradContext>(id);
  std::lock_guard<std::mutex> lock(mutex_);
  contexts_[id] = context;
  return context;
}

// Note [Late calls of released contexts]
// A driver releases its context on every worker that took part without waiting for anything,
// and a call of that context still in flight (an abandoned async call, a call on another path
// than the release: over gRPC nothing orders them, an RRef's release sent as its context ends)
// can reach a worker after the release. Joining the context then would create it anew, with
// nothing left to release it. So each process remembers the ids of the last kRememberedReleases
// contexts released on it, ids it never had included (the release may come first), and serves a
// late call of one in a context of its own, which ends with the call: the call runs, and nothing
// stays behind.
ContextPtr ContextContainer::get_or_create(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (released_.count(id) != 0) return std::make_shared<DistAutogradContext>(id);
  ContextPtr& context = contexts_[id];
  if (!context) context = std::make_shared<DistAutogradContext>(id);
  return context;
}

ContextPtr ContextContainer::find(int64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : it->second;
}

ContextPtr ContextContainer::release(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (released_.insert(id).second) {
    release_order_.push_back(id);
    if (release_order_.size() > kRememberedReleases) {
      released_.erase(release_order_.front());
      release_order_.pop_front();
    }
  }
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return nullptr;
  ContextPtr context = std::move(it->second);
  contexts_.erase(it);
  return context;
}

std::vector<ContextPtr> ContextContainer::contexts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ContextPtr> contexts;
  for (const auto& [id, context] : contexts_) contexts.push_back(context);
  return contexts;
}

int64_t ContextContainer::next_message_id() { return worker_prefix() | (next_message_.fetch_add(1) & kCounterMask); }

ContextPtr current_context() { return thread_state.context; }

const CallPath& current_call() { return thread_state.call; }

CallPath next_call() {
  CallPath call = thread_state.call;
  call.push_back(thread_state.calls_made++);
  return call;
}

CallPath upcoming_call() {
  CallPath call = thread_state.call;
  call.push_back(thread_state.calls_made);
  return call;
}

ContextScope::ContextScope(ContextPtr context, CallPath call)
    : ContextScope(ThreadState{std::move(context), std::move(call), 0}) {}

ContextScope::ContextScope(ThreadState state) : previous_(std::move(thread_state)) { thread_state = std::move(state); }

ContextScope ContextScope::repeating(ContextPtr context, const CallPath& call) {
  DISTGRAD_CHECK(!call.empty(), "ContextScope::repeating: expected the path of a call made, found the empty path");
  return ContextScope(ThreadState{std::move(context), CallPath(call.begin(), call.end() - 1), call.back()});
}

ContextScope::~ContextScope() { thread_state = std::move(previous_); }

}  // namespace distgrad::dist_autograd
