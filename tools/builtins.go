package tools

// Builtins returns the built-in tools, to register into a Registry: the
// file tools and the process tools (see ProcessTools). The file tools are
// file.read at 1.0.0 (RFC-0001 appendix A, exactly), 1.1.0 (offset and
// limit) and 1.2.0, file.list at 1.0.0 and 1.1.0, file.write at 1.0.0 and
// 1.1.0; the newest of each, the default, takes any file name without
// control characters (see [PathSchema]), the older ones only appendix A's
// ASCII set.
func Builtins() []Tool {
	return append([]Tool{FileRead(), FileReadRange(), FileRead12(), FileList(), FileList11(), FileWrite(), FileWrite11()}, ProcessTools()...)
}
