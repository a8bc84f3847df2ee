//go:build !unix

package imagebuild

// lock does not lock where there is no flock: concurrent builds then
// compile side by side, which is slower but just as correct (each writes
// its own output).
func lock(string) (unlock func(), err error) { return func() {}, nil }
