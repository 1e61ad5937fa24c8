package proc

// DisableEnforcement makes r behave as on a machine where neither cgroup v2
// nor prlimit works, to test the refusal and the best-effort watchdog.
func DisableEnforcement(r *Runner) {
	r.caps.Memory = ""
	r.caps.CgroupParent = ""
	r.caps.CgroupMemory = Support{Detail: "disabled by the test"}
	r.caps.Prlimit = Support{Detail: "disabled by the test"}
}

// NoPidfd makes r wait for the leader as on a kernel without pidfd_open.
func NoPidfd(r *Runner) { r.noPidfd = true }
