#ifndef REFIT_COMMON_HUGE_PAGES_H_
#define REFIT_COMMON_HUGE_PAGES_H_

#include <string>

namespace refit {

// Transparent huge pages for refit's own programs (refitd, `refit plan` and
// `refit simulate`, the planner benchmark), which build and walk a few
// hundred MB of small structs when they plan a large model.
//
// With 4 KiB pages that work is dominated by page faults and TLB misses.
// Measured on the 2-core development VM (paravirtualized, where every page
// fault traps to the hypervisor): first-touching 256 MiB takes ~0.7-0.9 s
// in 4 KiB pages and ~20 ms in 2 MiB pages, and `refit plan` for
// DeepSeek-V3 (256 -> 256 GPUs) drops from ~1.8 s to ~1.0 s wall, user
// time from ~1.25 s to ~0.6 s.
//
// glibc's malloc asks the kernel for huge pages (madvise(MADV_HUGEPAGE) on
// its heap and its mmap'd chunks) only when the tunable
// glibc.malloc.hugetlb=1 is in GLIBC_TUNABLES at start-up, and a running
// process cannot change its tunables. ReexecWithHugePages therefore
// re-executes the program once, same pid and arguments, with the tunable
// added. It returns without doing anything when:
//   - the tunable is already set (this is the re-executed process, or the
//     user chose a value);
//   - REFIT_HUGE_PAGES=0 is in the environment (the opt-out);
//   - transparent huge pages are not in "madvise" mode (with "always" the
//     kernel already uses them, with "never" asking is useless), or the
//     mode cannot be read;
//   - the C library is not glibc, or exec fails (the program then runs
//     as it is, only slower).
// Call it first thing in main(), before any thread starts. Under valgrind
// set REFIT_HUGE_PAGES=0: valgrind does not follow the exec by default, so
// the re-executed program would run outside the tool.
void ReexecWithHugePages(char** argv);

// True if /sys/kernel/mm/transparent_hugepage/enabled reads
// "... [madvise] ..." (false when it cannot be read).
bool ThpModeIsMadvise();

// The GLIBC_TUNABLES value with glibc.malloc.hugetlb=1 added to `existing`
// (null or empty: none), or "" if `existing` already sets that tunable.
std::string TunablesWithHugePages(const char* existing);

}  // namespace refit

#endif  // REFIT_COMMON_HUGE_PAGES_H_
