package tools

// Builtins returns the built-in tools, to register into a Registry:
// the file tools (file.read at 1.0.0 and 1.1.0, file.list, file.write) and
// the process tools (see ProcessTools).
func Builtins() []Tool {
	return append([]Tool{FileRead(), FileReadRange(), FileList(), FileWrite()}, ProcessTools()...)
}
