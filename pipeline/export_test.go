package pipeline

// SetIdentifyHook sets identifyHook for a test and removes it at cleanup.
func SetIdentifyHook(cleanup func(func()), hook func()) {
	identifyHook = hook
	cleanup(func() { identifyHook = nil })
}
