package tools

// Builtins returns the built-in tools, to register into a Registry:
// file.read and the process tools (see ProcessTools).
func Builtins() []Tool { return append([]Tool{FileRead()}, ProcessTools()...) }
