// The CPU backend between ranks on one host: collectives through shared memory, with no socket
// and no kernel copy on the way.
//
// Note [Shared-memory collectives]
// Every rank of the group owns one memfd segment (transport::shm::Segment) and maps every other
// rank's (transport::shm::open_segment): a control block, then two slots of kSlotBytes. A collective
// is a sequence of rounds, numbered over the group's life. In round R a rank writes what it
// contributes into its slot R % 2 and posts R in its control block (a futex word); once every
// rank has posted R it reads what it needs from the others' slots R % 2. Two slots make this
// safe without a second barrier: a rank writes slot R % 2 again in round R + 2, only after every
// rank has posted R + 1, which each does after it finished reading round R.
//   - all_reduce, per chunk (Note [Chunk size]): every rank copies its chunk in. With 2 ranks (or a
//     small chunk) every rank then reduces the whole chunk, in rank order, so all get the same
//     bits. With more ranks each reduces its 1/W slice and writes it into its other slot, and a
//     second round copies the others' slices out (a reduce-scatter, then an all-gather: about
//     2.75x the chunk read per rank at 4 ranks instead of 5x).
//   - broadcast: the root copies a chunk in, the others copy it out. all_gather: every rank
//     copies a chunk of its input in and the others' out. reduce_scatter: every rank copies a
//     chunk of its concatenated inputs in and reduces the part of it in its own share. barrier:
//     one round with nothing in it.
// The first round of every collective (barriers too) also carries the rank's CallSignature (in
// its control block, by round parity like the slots): every rank compares all of them before it
// reads any data, so ranks that passed different sizes, or called different collectives, fail
// alike, and the check costs nothing. Half-precision reductions compute in float, in rank order,
// and round once.
//
// Waiting. A rank waits for another's post by spinning for up to kSpin (the other is usually
// about to post), then sleeping on its futex word (a poster wakes sleepers only when there are
// some). Every kPoll a sleeper checks the deadline (the group's timeout), whether a rank failed
// or destroyed its group (a state word in its control block) and whether its process exited (a
// pidfd): a dead rank fails the others at once, a rank that never comes at the timeout.
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ddp/collective_backend.h"
#include "ddp/collective_thread.h"
#include "rendezvous/job_store.h"
#include "rendezvous/store.h"
#include "transport/shared_memory.h"

namespace distgrad::ddp {
namespace {

using Clock = std::chrono::steady_clock;
using transport::shm::Segment;
using transport::shm::SegmentRef;

// Each slot holds this much of a collective's data per round.
constexpr size_t kSlotBytes = size_t{1} << 20;
// Note [Chunk size]
// A collective moves at most a slot per round. When every rank has a CPU of its own, rounds are
// cheap (a spin of a microsecond or two) and chunks of kCachedChunkBytes stay in the caches
// between the rank that writes them and the ranks that read them: 64 MB all-reduced by 2 ranks
// took 17-18 ms in chunks of 128-256 KiB against 23 ms in chunks of 1 MiB on the 2-core VM of
// docs/benchmarks.md. With more ranks than CPUs each round waits for ranks to be scheduled, so
// whole slots amortize that better (4 ranks: 56-77 ms in 1 MiB chunks, 80-100 ms in 128-256 KiB).
// The ranks agree on the smallest chunk any of them asks for.
constexpr size_t kCachedChunkBytes = size_t{1} << 18;
// The control block's share of a segment, before the two slots.
constexpr size_t kControlBytes = 4096;
// A waiting rank spins this long before it sleeps, and a sleeper wakes this often to check on
// the others.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kPoll = std::chrono::milliseconds(50);
// all_reduce reduces whole chunks on every rank while a chunk from every rank is at most this big.
constexpr size_t kWholeChunkReduceBytes = size_t{1} << 20;
// Elements reduced together, so the output block stays in the L1 cache across the ranks' inputs.
constexpr size_t kReduceBlock = 2048;

enum RankState : uint32_t { kRunning = 0, kFailed = 1, kLeft = 2 };

// A rank's control block, at the start of its segment's data. Only the rank writes it, except
// for `sleepers`, which the ranks waiting for it count themselves in.
struct Control {
  std::atomic<uint32_t> posted{0};    // the last round this rank posted (a futex word)
  std::atomic<uint32_t> sleepers{0};  // ranks asleep on `posted`
  std::atomic<uint32_t> state{kRunning};
  CallSignature signatures[2] = {};  // of the collective whose first round has this parity
};
static_assert(sizeof(Control) <= kControlBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint32_t* futex_word(std::atomic<uint32_t>* word) { return reinterpret_cast<uint32_t*>(word); }

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec relative{seconds.count(), (timeout - seconds).count()};
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, expected, &relative, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Whether round `posted` is at or after `round` (round numbers wrap).
bool has_reached(uint32_t posted, uint32_t round) { return static_cast<int32_t>(posted - round) >= 0; }

// The type a reduction of T computes in: float for the half-precision types, T otherwise.
template <typename T>
using ComputeType = std::conditional_t<std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>, float, T>;

// out[i] = op over inputs[0..count)[i], in that order, for i < n, divided by `divisor` (kAvg),
// computed in Compute and rounded to T once per element. `out` may not overlap the inputs.
template <typename T, typename Combine>
void reduce_into(T* out, const T* const* inputs, size_t count, size_t n, Combine combine, ComputeType<T> divisor) {
  using Compute = ComputeType<T>;
  Compute block[kReduceBlock];  // the output block, in the L1 cache across the ranks' inputs
  for (size_t begin = 0; begin < n; begin += kReduceBlock) {
    const size_t length = std::min(kReduceBlock, n - begin);
    const T* __restrict first = inputs[0] + begin;
    for (size_t i = 0; i < length; ++i) block[i] = static_cast<Compute>(first[i]);
    for (size_t k = 1; k < count; ++k) {
      const T* __restrict next = inputs[k] + begin;
      for (size_t i = 0; i < length; ++i) block[i] = combine(block[i], static_cast<Compute>(next[i]));
    }
    if (divisor != Compute{1}) {
      for (size_t i = 0; i < length; ++i) block[i] /= divisor;
    }
    T* __restrict result = out + begin;
    for (size_t i = 0; i < length; ++i) result[i] = static_cast<T>(block[i]);
  }
}

// reduce_into with `op` (kAvg divides the sum by `ranks`; kMax and kMin propagate NaN, as
// PyTorch's do).
template <typename T>
void reduce_with(ReduceOp op, T* out, const T* const* inputs, size_t count, size_t n, int ranks) {
  using Compute = ComputeType<T>;
  const auto sum = [](Compute a, Compute b) { return a + b; };
  const Compute one{1};
  switch (op) {
    case ReduceOp::kSum: return reduce_into(out, inputs, count, n, sum, one);
    case ReduceOp::kAvg: return reduce_into(out, inputs, count, n, sum, static_cast<Compute>(ranks));
    case ReduceOp::kProduct:
      return reduce_into(
          out, inputs, count, n, [](Compute a, Compute b) { return a * b; }, one);
    case ReduceOp::kMax:
      return reduce_into(
          out, inputs, count, n, [](Compute a, Compute b) { return b > a || b != b ? b : a; }, one);
    case ReduceOp::kMin:
      return reduce_into(
          out, inputs, count, n, [](Compute a, Compute b) { return b < a || b != b ? b : a; }, one);
  }
}

// Reduces `n` elements of `dtype` at byte `offset` of every input into `out`.
void reduce(DType dtype, ReduceOp op, void* out, const std::vector<const uint8_t*>& inputs, size_t offset, size_t n) {
  dispatch_storage_dtype(dtype, "shared-memory reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("shared-memory reduce: bool tensors are not reduced");
    } else {
      std::vector<const T*> typed;
      for (const uint8_t* input : inputs) typed.push_back(reinterpret_cast<const T*>(input + offset));
      reduce_with(op, static_cast<T*>(out), typed.data(), typed.size(), n, static_cast<int>(inputs.size()));
    }
  });
}

// memcpy that allows null pointers for 0 bytes (0-element tensors may have no data).
void copy_bytes(void* destination, const void* source, size_t bytes) {
  if (bytes > 0) std::memcpy(destination, source, bytes);
}

// The first element of rank `rank`'s slice when `n` elements are shared by `ranks` ranks
// (whole cache lines where it can).
size_t slice_begin(size_t n, int rank, int ranks) {
  const size_t begin = n * static_cast<size_t>(rank) / static_cast<size_t>(ranks);
  return std::min(n, (begin + 15) / 16 * 16);
}

// One rank of the group as this process sees it: its control block and slots (in this process's
// segment or a mapping of the rank's), and how to tell that its process exited.
struct Rank {
  Rank() = default;
  Rank(Rank&& other) noexcept
      : pid(other.pid),
        mapping(std::move(other.mapping)),
        control(other.control),
        slots(other.slots),
        pidfd(std::exchange(other.pidfd, -1)) {}
  Rank& operator=(Rank&&) = delete;
  ~Rank() {
    if (pidfd >= 0) ::close(pidfd);
  }

  int64_t pid = 0;
  std::shared_ptr<SharedMemory> mapping;  // null for this process's own rank
  Control* control = nullptr;
  uint8_t* slots = nullptr;
  int pidfd = -1;  // owned; -1: this rank, or pidfd_open failed (then kill(pid, 0) tells)

  bool exited() const {
    if (pidfd >= 0) {
      pollfd ready{pidfd, POLLIN, 0};
      return ::poll(&ready, 1, 0) > 0;
    }
    return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  }
};

class SharedMemoryBackend final : public CollectiveBackend {
 public:
  SharedMemoryBackend(const GroupSetup& setup, std::unique_ptr<Segment> segment, std::vector<Rank> ranks,
                      size_t chunk_bytes)
      : setup_(setup),
        chunk_bytes_(chunk_bytes),
        segment_(std::move(segment)),
        ranks_(std::move(ranks)),
        thread_(std::make_unique<CollectiveThread>([](const std::string& message) { return message; })) {}

  ~SharedMemoryBackend() override {
    thread_.reset();  // runs or fails what is queued, then joins
    Control& mine = *ranks_[setup_.rank].control;
    mine.state.store(kLeft);
    futex_wake_all(&mine.posted);
  }

  const char* name() const override { return "shm"; }

  void all_reduce(const Tensor& tensor, ReduceOp op, std::shared_ptr<Work> work, const Launch& launch) override {
    run(std::move(work), launch.caller_waits, [this, tensor, op, signature = launch.signature] {
      if (size() == 1) return;
      const size_t element = tensor.element_size();
      const size_t n = static_cast<size_t>(tensor.numel());
      const size_t chunk = chunk_bytes_ / element;
      auto* data = static_cast<uint8_t*>(tensor.data_ptr());
      for (size_t begin = 0; begin == 0 || begin < n; begin += chunk) {
        const size_t count = std::min(chunk, n - begin);
        const uint32_t round = next_round();
        copy_bytes(slot(setup_.rank, round), data + begin * element, count * element);
        exchange(round, begin == 0 ? &signature : nullptr);
        if (size() == 2 || count * element * static_cast<size_t>(size()) <= kWholeChunkReduceBytes) {
          reduce(tensor.dtype(), op, data + begin * element, slots(round), 0, count);
          continue;
        }
        // Reduce this rank's slice, then gather the others' (Note [Shared-memory collectives]).
        const uint32_t gather = next_round();
        const size_t mine = slice_begin(count, setup_.rank, size());
        const size_t mine_end = slice_begin(count, setup_.rank + 1, size());
        uint8_t* out = data + begin * element;
        reduce(tensor.dtype(), op, out + mine * element, slots(round), mine * element, mine_end - mine);
        copy_bytes(slot(setup_.rank, gather) + mine * element, out + mine * element, (mine_end - mine) * element);
        exchange(gather, nullptr);
        for (int r = 0; r < size(); ++r) {
          if (r == setup_.rank) continue;
          const size_t first = slice_begin(count, r, size()), end = slice_begin(count, r + 1, size());
          copy_bytes(out + first * element, slot(r, gather) + first * element, (end - first) * element);
        }
      }
    });
  }

  void broadcast(const Tensor& tensor, int root, std::shared_ptr<Work> work, const Launch& launch) override {
    run(std::move(work), launch.caller_waits, [this, tensor, root, signature = launch.signature] {
      if (size() == 1) return;
      auto* data = static_cast<uint8_t*>(tensor.data_ptr());
      const size_t bytes = tensor.nbytes();
      for (size_t begin = 0; begin == 0 || begin < bytes; begin += chunk_bytes_) {
        const size_t count = std::min(chunk_bytes_, bytes - begin);
        const uint32_t round = next_round();
        if (setup_.rank == root) copy_bytes(slot(root, round), data + begin, count);
        exchange(round, begin == 0 ? &signature : nullptr);
        if (setup_.rank != root) copy_bytes(data + begin, slot(root, round), count);
      }
    });
  }

  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, std::shared_ptr<Work> work,
                  const Launch& launch) override {
    run(std::move(work), launch.caller_waits, [this, outputs, input, signature = launch.signature] {
      const auto* mine = static_cast<const uint8_t*>(input.data_ptr());
      const size_t my_bytes = input.nbytes();
      if (outputs[setup_.rank].data_ptr() != mine && my_bytes > 0) {
        std::memmove(outputs[setup_.rank].data_ptr(), mine, my_bytes);
      }
      size_t largest = 0;
      for (const Tensor& output : outputs) largest = std::max(largest, output.nbytes());
      for (size_t begin = 0; begin == 0 || begin < largest; begin += chunk_bytes_) {
        const uint32_t round = next_round();
        copy_bytes(slot(setup_.rank, round), mine + std::min(begin, my_bytes), chunk_of(my_bytes, begin));
        exchange(round, begin == 0 ? &signature : nullptr);
        for (int r = 0; r < size(); ++r) {
          if (r == setup_.rank) continue;
          const size_t count = chunk_of(outputs[r].nbytes(), begin);  // 0: no pointer past an empty tensor
          if (count > 0) copy_bytes(static_cast<uint8_t*>(outputs[r].data_ptr()) + begin, slot(r, round), count);
        }
      }
    });
  }

  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, std::shared_ptr<Work> work,
                      const Launch& launch) override {
    run(std::move(work), launch.caller_waits, [this, output, inputs, op, signature = launch.signature] {
      // Byte offsets of each rank's share in the concatenated inputs.
      const size_t element = output.element_size();
      std::vector<size_t> offsets{0};
      for (const Tensor& input : inputs) offsets.push_back(offsets.back() + input.nbytes());
      const size_t total = offsets.back();
      const size_t share_begin = offsets[setup_.rank], share_end = offsets[setup_.rank + 1];
      auto* out = static_cast<uint8_t*>(output.data_ptr());
      const size_t chunk = chunk_bytes_ / element * element;
      for (size_t begin = 0; begin == 0 || begin < total; begin += chunk) {
        const size_t end = std::min(total, begin + chunk);
        const uint32_t round = next_round();
        uint8_t* destination = slot(setup_.rank, round);
        for (size_t r = 0; r < inputs.size(); ++r) {
          const size_t from = std::max(begin, offsets[r]), to = std::min(end, offsets[r + 1]);
          if (from < to) {
            copy_bytes(destination + (from - begin),
                       static_cast<const uint8_t*>(inputs[r].data_ptr()) + (from - offsets[r]), to - from);
          }
        }
        exchange(round, begin == 0 ? &signature : nullptr);
        const size_t from = std::max(begin, share_begin), to = std::min(end, share_end);
        if (from < to) {
          reduce(output.dtype(), op, out + (from - share_begin), slots(round), from - begin, (to - from) / element);
        }
      }
    });
  }

  void barrier(std::shared_ptr<Work> work, const Launch& launch) override {
    run(std::move(work), launch.caller_waits,
        [this, signature = launch.signature] { exchange(next_round(), &signature); });
  }

 private:
  int size() const { return setup_.size; }
  Control& mine() const { return *ranks_[setup_.rank].control; }
  uint8_t* slot(int rank, uint32_t round) const { return ranks_[rank].slots + (round % 2) * kSlotBytes; }
  // Every rank's slot of `round`, in rank order.
  std::vector<const uint8_t*> slots(uint32_t round) const {
    std::vector<const uint8_t*> all;
    for (int r = 0; r < size(); ++r) all.push_back(slot(r, round));
    return all;
  }
  uint32_t next_round() { return ++round_; }

  // Bytes of a `total`-byte buffer in the chunk that starts at `begin`.
  size_t chunk_of(size_t total, size_t begin) const {
    return begin < total ? std::min(chunk_bytes_, total - begin) : 0;
  }

  // Runs `collective` in call order (Note [One thread per group]); a failure other than a
  // mismatch tells the other ranks at once through this rank's state.
  void run(std::shared_ptr<Work> work, bool caller_waits, std::function<void()> collective) {
    thread_->submit(std::move(work), caller_waits, [this, collective = std::move(collective)] {
      deadline_ = Clock::now() + setup_.timeout;
      try {
        collective();
      } catch (const CallMismatch&) {
        throw;
      } catch (const std::exception&) {
        mine().state.store(kFailed);
        futex_wake_all(&mine().posted);
        throw;
      }
    });
  }

  // Posts `round` (with the collective's signature on its first round), waits until every rank
  // has, and then checks that every rank passed the same signature (Note [Shared-memory
  // collectives]: every rank sees every signature, so all fail alike).
  void exchange(uint32_t round, const CallSignature* signature) {
    if (signature != nullptr) mine().signatures[round % 2] = *signature;
    mine().posted.store(round);
    if (mine().sleepers.load() != 0) futex_wake_all(&mine().posted);
    for (int r = 0; r < size(); ++r) {
      if (r != setup_.rank) wait_for(r, round);
    }
    if (signature == nullptr) return;
    for (size_t field = 0; field < CallSignature{}.size(); ++field) {
      for (const Rank& rank : ranks_) {
        if (rank.control->signatures[round % 2][field] != ranks_[0].control->signatures[round % 2][field]) {
          throw signature_mismatch(field);
        }
      }
    }
  }

  // Returns once rank `r` has posted `round` (Note [Shared-memory collectives], "Waiting").
  void wait_for(int r, uint32_t round) {
    Control& other = *ranks_[r].control;
    const auto reached = [&] { return has_reached(other.posted.load(std::memory_order_acquire), round); };
    const Clock::time_point spin_end = Clock::now() + kSpin;
    do {
      for (int i = 0; i < 64; ++i) {
        if (reached()) return;
        cpu_relax();
      }
    } while (Clock::now() < spin_end);
    for (;;) {
      check_ranks(r, reached);
      other.sleepers.fetch_add(1);
      const uint32_t posted = other.posted.load();
      if (!has_reached(posted, round)) {
        futex_wait(&other.posted, posted, std::min<Clock::duration>(kPoll, deadline_ - Clock::now()));
      }
      other.sleepers.fetch_sub(1);
      if (reached()) return;
    }
  }

  // Throws when the collective cannot finish: past the deadline, a rank failed, left or exited
  // (unless `reached` shows that rank `awaited` posted meanwhile).
  template <typename Reached>
  void check_ranks(int awaited, const Reached& reached) const {
    std::string problem;
    if (Clock::now() >= deadline_) {
      problem = "timed out after " + std::to_string(setup_.timeout.count()) + " ms waiting for rank " +
                std::to_string(awaited) + " (a rank may have died, or not called the same collective)";
    }
    for (int r = 0; r < size() && problem.empty(); ++r) {
      if (r == setup_.rank) continue;
      const uint32_t state = ranks_[r].control->state.load();
      if (state == kFailed) problem = "rank " + std::to_string(r) + " failed in this collective or an earlier one";
      if (state == kLeft) problem = "rank " + std::to_string(r) + " destroyed its process group";
      if (ranks_[r].exited()) {
        problem = "rank " + std::to_string(r) + " (pid " + std::to_string(ranks_[r].pid) + ") exited";
      }
    }
    if (!problem.empty() && !reached()) throw Error(problem);
  }

  const GroupSetup setup_;
  const size_t chunk_bytes_;                // moved per round (Note [Chunk size]); the ranks agreed on it
  const std::unique_ptr<Segment> segment_;  // this rank's control block and slots
  std::vector<Rank> ranks_;                 // by group rank; ranks_[rank].mapping is null
  // Only the running collective reads and writes these (Note [One thread per group]).
  uint32_t round_ = 0;
  Clock::time_point deadline_;                // of the running collective
  std::unique_ptr<CollectiveThread> thread_;  // last: reset first (see the destructor)
};

// The chunk this rank asks for in a group of `ranks` (Note [Chunk size]).
size_t preferred_chunk_bytes(int ranks) {
  cpu_set_t cpus;
  const bool known = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0;
  return known && ranks <= CPU_COUNT(&cpus) ? kCachedChunkBytes : kSlotBytes;
}

// What another rank needs to map this rank's segment, and the chunk it asks for.
struct Card {
  std::string identity;
  int64_t pid = 0;
  SegmentRef ref;
  size_t chunk_bytes = 0;
};

// "IDENTITY\nPID FD INODE FILE_BYTES CHUNK_BYTES"
std::string card_of(const Segment& segment, int ranks) {
  const SegmentRef ref = segment.ref(0);
  return SharedMemory::host_identity() + "\n" + std::to_string(::getpid()) + " " + std::to_string(ref.fd) + " " +
         std::to_string(ref.inode) + " " + std::to_string(ref.file_bytes) + " " +
         std::to_string(preferred_chunk_bytes(ranks));
}

std::optional<Card> parse_card(const std::string& text) {
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  Card card{text.substr(0, newline), 0, {}, 0};
  std::istringstream numbers(text.substr(newline + 1));
  if (!(numbers >> card.pid >> card.ref.fd >> card.ref.inode >> card.ref.file_bytes >> card.chunk_bytes) ||
      card.chunk_bytes == 0 || card.chunk_bytes > kSlotBytes) {
    return std::nullopt;
  }
  return card;
}

// Every rank's value of `name`, after this rank set its own.
std::vector<std::string> exchange_through_store(const GroupSetup& setup, const std::string& name,
                                                const std::string& value) {
  rendezvous::StoreClient& store = setup.store->client();
  std::vector<std::string> keys;
  for (int r = 0; r < setup.size; ++r) keys.push_back(setup.key_prefix + name + "/" + std::to_string(r));
  store.set(keys[setup.rank], value);
  const std::vector<std::string> missing = store.wait_for(keys, setup.timeout);
  DISTGRAD_CHECK(missing.empty(), "process group '", setup.group_name, "': rank ", setup.rank, " of ", setup.size,
                 " waited ", setup.timeout.count(), " ms for the other ranks to join; ", missing.size(),
                 " did not (first missing: ", missing.empty() ? "" : missing.front(), ")");
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(store.get(key, setup.timeout));
  return values;
}

}  // namespace

std::unique_ptr<CollectiveBackend> make_shared_memory_backend(const GroupSetup& setup) {
  std::unique_ptr<Segment> segment;
  if (setup.shared_memory) {
    try {
      segment = std::make_unique<Segment>(kControlBytes + 2 * kSlotBytes);
      new (segment->data()) Control();
    } catch (const Error&) {
      segment.reset();  // cannot make one here: the group uses Gloo
    }
  }
  // Round 1: every rank's card, or "off". Every rank decides alike from the same cards.
  const std::vector<std::string> texts =
      exchange_through_store(setup, "card", segment ? card_of(*segment, setup.size) : "off");
  std::vector<Card> cards;
  for (const std::string& text : texts) {
    std::optional<Card> card = parse_card(text);
    if (!card || (!cards.empty() && card->identity != cards.front().identity)) return nullptr;  // Gloo
    cards.push_back(std::move(*card));
  }
  // Round 2: whether this rank could map every other's segment.
  std::vector<Rank> ranks(setup.size);
  std::string mapped = "ok";
  for (int r = 0; r < setup.size && mapped == "ok"; ++r) {
    Rank& rank = ranks[r];
    rank.pid = cards[r].pid;
    if (r == setup.rank) {
      rank.control = reinterpret_cast<Control*>(segment->data());
      rank.slots = segment->data() + kControlBytes;
      continue;
    }
    rank.mapping = transport::shm::open_segment(cards[r].pid, cards[r].ref, &mapped);
    if (!rank.mapping) break;
    rank.control = reinterpret_cast<Control*>(rank.mapping->data());
    rank.slots = rank.mapping->data() + kControlBytes;
    rank.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(rank.pid), 0));
  }
  const std::vector<std::string> results = exchange_through_store(setup, "mapped", mapped);
  const bool everyone_mapped = std::all_of(results.begin(), results.end(), [](const auto& r) { return r == "ok"; });
  if (!everyone_mapped) return nullptr;
  size_t chunk_bytes = kSlotBytes;
  for (const Card& card : cards) chunk_bytes = std::min(chunk_bytes, card.chunk_bytes);
  return std::make_unique<SharedMemoryBackend>(setup, std::move(segment), std::move(ranks), chunk_bytes);
}

}  // namespace distgrad::ddp
