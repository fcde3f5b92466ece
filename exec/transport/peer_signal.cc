// PeerSignal (see peer_signal.h).
#include "exec/transport/peer_signal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace refit {

struct PeerSignal::Shared {
  std::atomic<uint64_t> value;
  std::atomic<uint32_t> futex;  // bumped by every Publish
};

namespace {

constexpr char kPrefix[] = "/refit-signal-";
constexpr size_t kPage = 4096;
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4,
              "lock-free words in shared memory");

absl::Status Sys(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Waits while *word == expected, at most `us` microseconds.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t us) {
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts,
                nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr,
                nullptr, 0);
}

bool ProcessExists(int64_t pid) {
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Whether /proc says `pid` is a zombie (exited, not yet reaped).
bool IsZombie(int64_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* paren = strrchr(buf, ')');  // "pid (comm) S ..."
  return paren != nullptr && paren[1] == ' ' && paren[2] == 'Z';
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerSignal>> PeerSignal::Create() {
  std::random_device rd;
  const std::string name =
      absl::StrCat(kPrefix, getpid(), "-", (static_cast<uint64_t>(rd()) << 32) | rd());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Sys(absl::StrCat("shm_open(", name, ")"));
  if (ftruncate(fd, kPage) != 0) {
    absl::Status s = Sys(absl::StrCat("ftruncate(", name, ")"));
    close(fd);
    shm_unlink(name.c_str());
    return s;
  }
  void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    absl::Status s = Sys(absl::StrCat("mmap(", name, ")"));
    shm_unlink(name.c_str());
    return s;
  }
  std::unique_ptr<PeerSignal> sig(new PeerSignal());
  sig->shared_ = new (p) Shared{};
  sig->shared_->value.store(0, std::memory_order_relaxed);
  sig->shared_->futex.store(0, std::memory_order_release);
  sig->name_ = name;
  sig->owner_pid_ = getpid();
  sig->owner_ = true;
  sig->linked_ = true;
  return sig;
}

absl::StatusOr<std::unique_ptr<PeerSignal>> PeerSignal::Open(const std::string& name,
                                                             int64_t owner_pid) {
  if (!absl::StartsWith(name, kPrefix) || name.size() > 96 ||
      name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("not a refit signal name: ", name));
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Sys(absl::StrCat("shm_open(", name, ")"));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kPage)) {
    close(fd);
    return absl::UnavailableError(absl::StrCat(name, " is not a signal page"));
  }
  void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Sys(absl::StrCat("mmap(", name, ")"));
  std::unique_ptr<PeerSignal> sig(new PeerSignal());
  sig->shared_ = static_cast<Shared*>(p);
  sig->name_ = name;
  sig->owner_pid_ = owner_pid;
  if (owner_pid > 0 && owner_pid != getpid() && ProcessExists(owner_pid)) {
    sig->check_owner_ = true;
    // A pidfd turns readable when the process exits, zombie or not; where
    // pidfd_open is missing or forbidden, kill(pid, 0) and /proc serve.
    sig->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(owner_pid), 0));
  }
  return sig;
}

PeerSignal::~PeerSignal() {
  if (owner_) Unlink();
  if (pidfd_ >= 0) close(pidfd_);
  if (shared_ != nullptr) munmap(shared_, kPage);
}

void PeerSignal::Unlink() {
  if (owner_ && linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

void PeerSignal::Publish(uint64_t value) {
  shared_->value.store(value, std::memory_order_release);
  shared_->futex.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&shared_->futex);
}

bool PeerSignal::OwnerGone() const {
  if (!check_owner_) return false;
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return !ProcessExists(owner_pid_) || IsZombie(owner_pid_);
}

absl::StatusOr<uint64_t> PeerSignal::WaitAtLeast(uint64_t at_least, absl::Time deadline,
                                                 const Cancellation& cancel,
                                                 const std::string& who) const {
  while (true) {
    const uint32_t seen = shared_->futex.load(std::memory_order_acquire);
    const uint64_t v = shared_->value.load(std::memory_order_acquire);
    if (v >= at_least) return v;
    if (cancel.cancelled()) return cancel.status();
    if (OwnerGone()) {
      return absl::UnavailableError(
          absl::StrCat(who, " (process ", owner_pid_, ") exited"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(who, " did not signal by the deadline"));
    }
    FutexWait(&shared_->futex, seen, 1000);
  }
}

}  // namespace refit
