package service

// SetPageBytes lowers the page bound (PageBytes) to n bytes until the
// returned restore is called (0: back to PageBytes). Tests that set it must
// not run in parallel with other tests that list.
func SetPageBytes(n int) (restore func()) {
	old := pageBytes.Swap(int64(n))
	return func() { pageBytes.Store(old) }
}
