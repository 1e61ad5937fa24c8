// Package proc runs one child process under limits: the enforcement point
// of process tools. The runtime wraps it with capability checks (which
// commands a principal may run); this package enforces what a run may use
// and says precisely how it ended.
//
// In-process Go tools are trusted code: nothing here constrains them. A
// process tool is where isolation is enforced, and only as far as described
// below.
//
// # What Run guarantees
//
//   - argv only, never a shell: Spec.Args reach the program as they are.
//   - The environment is exactly Spec.Env; nothing of ours is inherited.
//   - The command is resolved to an absolute path by [Resolve], which refuses
//     empty and relative PATH entries (a planted ./git never runs) and says
//     so in its error.
//   - The child leads a new process group. On timeout, context cancellation,
//     the memory watchdog or the output hard cap, the whole group gets
//     SIGKILL. When the leader exits on its own, what is left of its group
//     is killed too, before the leader is reaped (so the group id cannot have
//     been reused): no process of the group outlives Run.
//   - Output is captured up to Spec.MaxStdout and Spec.MaxStderr; the pipes
//     keep being drained past the caps and the rest is counted and discarded,
//     so a flood never blocks the child nor grows our memory. Each stream has
//     a truncation flag and its total size.
//   - Run returns within about the timeout plus Options.WaitDelay (500 ms
//     by default) even if a process that left the group holds the output
//     pipes (twice WaitDelay if it also holds a Spec.Stdin that is not a
//     file, whose copy os/exec bounds after ours).
//   - A run that hit a limit returns what was captured until then, a Result
//     naming the limit, and a [*LimitError]; a timeout is never a success.
//   - A limit that cannot be enforced is never skipped silently: Run refuses
//     with an [*UnenforceableError] (for memory, unless Spec.BestEffortMemory).
//
// # Outcomes
//
// Launch failures are a [*LaunchError] with a [LaunchKind] and no Result.
// A process that ran is classified in this order, first match wins:
//
//  1. cgroup v2: memory.events oom_kill > 0 in the run's cgroup: memory_limit.
//  2. A kill of ours, by its first reason: timeout, memory_limit (the
//     watchdog), output_limit, or cancellation (ErrCanceled).
//  3. Killed by SIGXFSZ with Spec.MaxFileSize set: file_size_limit.
//  4. Exit status 0: success.
//  5. Memory under prlimit, a heuristic: the process failed (non-zero exit or
//     a signal) and its stderr, all of it including what was not kept, holds
//     an allocation-failure phrase ("out of memory", "Cannot allocate memory",
//     "memory exhausted", the Go runtime's "failed to reserve", ...):
//     memory_limit, with the phrase as Result.Evidence.
//  6. File size, a heuristic: the process failed and its stderr says "File
//     too large" (EFBIG: programs that ignore or catch SIGXFSZ, as Go does,
//     see the write fail instead): file_size_limit.
//  7. Otherwise a [*SignalError] or an [*ExitError].
//
// Steps 1 to 3 are definitive. Steps 5 and 6 are evidence, not proof: a
// program may print such a phrase for another reason (false positive), or
// fail silently, or print it on stdout, when the kernel refused it memory
// (false negative, reported as an ExitError). Result.Evidence always says
// which rule decided. [ErrorType] maps every outcome to a stable
// error.type string.
//
// # Memory
//
// With a writable cgroup v2 hierarchy whose memory controller is enabled
// for children (Options.CgroupParent, else this process's own cgroup), each
// run with Spec.MaxMemory gets a child cgroup with memory.max (swap off,
// memory.oom.group on), the child is started directly into it with
// CLONE_INTO_CGROUP (SysProcAttr.UseCgroupFD), so no instruction of the
// child runs outside it, every kill also writes cgroup.kill (reaching
// processes that left the process group), and the cgroup is removed after.
// memory.max counts resident memory and page cache of the whole cgroup.
// This path needs Linux 5.7 (clone3 with CLONE_INTO_CGROUP) and, for
// cgroup.kill, 5.14 (before, each pid of cgroup.procs is killed). Probe does
// not check the kernel version: an older kernel fails the start with a
// *LaunchError of kind KindOther.
//
// Otherwise (cgroup v1 machines, no delegation) RLIMIT_AS is set on the
// child with prlimit(2) (never setrlimit on our own process), and a watchdog
// sums the resident memory (/proc/<pid>/stat) of every process of the group
// every Options.WatchdogInterval and kills the group when the sum passes
// the limit. RLIMIT_AS counts virtual address space, not resident memory:
// programs that reserve much address space (the Go runtime, the JVM, the
// race detector) fail far below Spec.MaxMemory of real use, often at
// start-up: a Go program needs a limit of several hundred megabytes just to
// start. Run such tools where a cgroup v2 memory controller is delegated.
// RLIMIT_AS is also per process, inherited by children forked after it is
// set, so a group of processes can use a multiple of it: that is what the
// watchdog's sum catches. The watchdog sees only the process group: a
// process that calls setsid or setpgid escapes it (and escapes the kill),
// and a group can grow between two samples.
//
// # The prlimit race
//
// prlimit(2) can only be applied once the child exists, which with os/exec
// is after it has exec'd: for some microseconds, and up to milliseconds on
// a loaded machine (a test saw dd write 4 MiB first), the new program runs
// without RLIMIT_AS and RLIMIT_FSIZE, and anything it maps or forks in that
// window is not limited (mappings made before stay; later ones count).
// So when util-linux prlimit(1) is installed (/usr/bin/prlimit or
// /bin/prlimit, root-owned, writable only by root), a limited command is
// started through it: it sets the limits and then execs the command, which
// closes the window (the command then sees its absolute path as argv[0]).
// The window remains only where prlimit(1) is missing. memory.max on the
// cgroup path has no window either (the child starts inside its cgroup).
//
// # Not guaranteed
//
//   - No filesystem, network or privilege isolation: the child runs as our
//     user, in our namespaces, seeing what we see.
//   - Processes that leave the process group (setsid, setpgid, a daemon)
//     are not killed on the prlimit path; only cgroup.kill reaches them.
//   - If our own process dies (even by SIGKILL), the child dies with it: it
//     is started with SIGKILL as its parent-death signal, from an OS thread
//     that outlives it (see spawn.go for why and how). Only the
//     direct child gets that signal: the rest of its group outlives us,
//     until Reap, given the Identity that Spec.OnStart recorded, kills it.
//   - Usage.MaxRSS is from wait4(2): the child and the descendants it waited
//     for, not the whole group.
//
// # Concurrency
//
// A Runner is safe for concurrent use; it holds no per-run state. Run
// reads the output pipes itself, in poll(2) with a pidfd of the leader
// (every 10 ms a look at the leader where the kernel has no pidfd), and
// watches the context through a callback: a run starts no goroutine of its
// own but the watchdog's, and os/exec's copy of a Spec.Stdin that is not a
// file (which os/exec leaves behind after WaitDelay if it is blocked in
// Read). The goroutine that calls Run stays on its OS thread from the fork
// to the reap (spawn.go).
package proc
