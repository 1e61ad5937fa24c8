package tools

// WaitBackgroundDirs waits until the background work on the fresh working
// directories (removals, the spare being made) is done, leaving the spare.
func WaitBackgroundDirs() { scratch.waitIdle() }
