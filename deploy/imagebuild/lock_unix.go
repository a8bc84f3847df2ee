//go:build unix

package imagebuild

import (
	"os"
	"syscall"
)

// lock takes the exclusive lock on the file name, waiting for it; the
// kernel releases it when the process ends, however it ends. The file is
// opened read-only, which flock needs no more than, so that another user's
// lock file serves too.
func lock(name string) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
