package tenancy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tempPrefix starts every temporary file's name, so that removeTemps finds
// what a crash left behind.
const tempPrefix = ".tmp-"

// writeFileAtomic writes dir/name through a synced temporary file renamed
// over it, then syncs dir, so that a crash leaves the old file or the new.
func writeFileAtomic(dir, name string, b []byte, beforeRename func() error) error {
	f, err := os.CreateTemp(dir, tempPrefix+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && beforeRename != nil {
		err = beforeRename()
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// removeTemps removes the temporary files a crash left in dir.
func removeTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
